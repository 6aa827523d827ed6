// The TensorRT plugin's enqueue on a GPU, as an engine runs it: the plugin is built and
// configured through its build interface with a dynamic profile, its workspace is what
// getWorkspaceSize asked for, and enqueue runs on a stream with PluginTensorDescs over device
// buffers in the node's layout (bshd, bhsd, packed_qkv). Its output meets FlashAttention's
// accuracy rule against the library's fp64 CPU reference. Skipped without a CUDA device.
#include <array>
#include <cstring>

#include "gpu_support.h"
#include "support.h"
#include "trt_support.h"

namespace fa_trt_test {
namespace {

using fa::test::Case;
using fa::test::HostTensor;
using fa::test::Problem;
using nvinfer1::DataType;

struct GpuCase {
  std::string layout;
  Case c;
  bool fields_give_heads;  // bshd / bhsd: num_heads / num_kv_heads given (else 0: from the shapes)
};

void PrintTo(const GpuCase& g, std::ostream* os) { *os << g.layout << "_" << g.c.name(); }

std::vector<GpuCase> grid() {
  std::vector<GpuCase> cases;
  int n = 0;
  for (const char* layout : {"bshd", "bhsd", "packed_qkv"})
    for (fa_dtype dt : {FA_DTYPE_FP16, FA_DTYPE_BF16})
      for (int feature = 0; feature < 5; ++feature)
        for (int64_t d : {64, 128}) {
          Case c;
          c.dtype = dt;
          c.head_dim = d;
          c.batch = 2;
          c.heads_q = 8;
          c.heads_kv = feature == 3 ? 2 : feature == 4 ? 1 : 8;  // GQA, MQA
          const bool packed = std::string(layout) == "packed_qkv";
          c.seqlen_q = packed ? 157 : 113;  // not tile multiples; packed is self-attention
          c.seqlen_k = packed ? 157 : 203;
          c.causal = feature == 1;
          if (feature == 2) c.window_left = 37, c.window_right = 5;
          if (feature == 3) c.softcap = 30.f;
          if (feature == 4) c.softmax_scale = 0.3f;
          c.seed = uint64_t(++n);
          cases.push_back({layout, c, n % 2 == 0});
        }
  return cases;
}

#ifdef FA_TEST_CUDA
// The tensor x (b, s, h, d) in the layout's memory order: (b, h, s, d) for bhsd, else as it is.
HostTensor in_layout(const HostTensor& x, bool bhsd) {
  const auto& s = x.shape();
  if (!bhsd) return x;
  HostTensor t(x.dtype(), {s[0], s[2], s[1], s[3]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < s[1]; ++i)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t e = 0; e < s[3]; ++e)
          t.set(((b * s[2] + h) * s[1] + i) * s[3] + e, x.get(((b * s[1] + i) * s[2] + h) * s[3] + e));
  return t;
}

// q, k, v (b, s, h, d) / (b, s, h_kv, d) as one (b, s, (h + 2 h_kv) d) tensor: Q heads, K heads, V heads.
HostTensor packed(const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  const int64_t b = q.shape()[0], s = q.shape()[1], hq = q.shape()[2], hk = k.shape()[2], d = q.shape()[3];
  const int64_t row = (hq + 2 * hk) * d;
  HostTensor t(q.dtype(), {b, s, row});
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < s; ++i) {
      const int64_t base = (bi * s + i) * row;
      for (int64_t e = 0; e < hq * d; ++e) t.set(base + e, q.get((bi * s + i) * hq * d + e));
      for (int64_t e = 0; e < hk * d; ++e) {
        t.set(base + hq * d + e, k.get((bi * s + i) * hk * d + e));
        t.set(base + (hq + hk) * d + e, v.get((bi * s + i) * hk * d + e));
      }
    }
  return t;
}

nvinfer1::Dims dims_of(const HostTensor& t) {
  nvinfer1::Dims d{};
  d.nbDims = int32_t(t.shape().size());
  for (size_t i = 0; i < t.shape().size(); ++i) d.d[i] = t.shape()[i];
  return d;
}

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n, const void* host = nullptr) : bytes(n) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(n, 1)), cudaSuccess);
    if (host) EXPECT_EQ(cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice), cudaSuccess);
    else EXPECT_EQ(cudaMemset(ptr, 0xFF, std::max<size_t>(n, 1)), cudaSuccess);  // NaN
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

size_t bytes_of(const HostTensor& t) { return size_t(t.numel() * t.elem_size()); }
#endif

class GpuTrtPlugin : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuTrtPlugin, EnqueueMatchesTheReference) {
  const GpuCase& g = GetParam();
  std::string why;
  if (fa::test::skip_without_gpu(&why) || fa::test::skip_head_dim_not_built(g.c.head_dim, &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  const Case& c = g.c;
  const bool bhsd = g.layout == "bhsd", is_packed = g.layout == "packed_qkv";
  Problem pr(c);
  std::vector<HostTensor> ins;
  if (is_packed) {
    ins.push_back(packed(pr.q, pr.k, pr.v));
  } else {
    ins = {in_layout(pr.q, bhsd), in_layout(pr.k, bhsd), in_layout(pr.v, bhsd)};
  }
  const HostTensor out_shape = in_layout(pr.out, bhsd);  // bhsd's output is (b, h, s, d)
  const bool heads = is_packed || g.fields_give_heads;
  Fields f;
  f.i("causal", c.causal).i("window_left", c.window_left).i("window_right", c.window_right);
  f.f("softcap", c.softcap).f("scale", c.softmax_scale).s("layout", g.layout);
  f.i("num_heads", heads ? int32_t(c.heads_q) : 0).i("num_kv_heads", heads ? int32_t(c.heads_kv) : 0);
  nvinfer1::IPluginCreatorV3One* cr = creator("");
  ASSERT_NE(cr, nullptr);
  PluginPtr p(cr->createPlugin("gpu_case", f.collection(), nvinfer1::TensorRTPhase::kBUILD));
  ASSERT_NE(p, nullptr) << Library::get().messages.last_error();
  const DataType type = c.dtype == FA_DTYPE_BF16 ? DataType::kBF16 : DataType::kHALF;

  // Build: a profile whose batch and sequence axes are dynamic, its largest shapes this call's
  // (so that the workspace is the library's for exactly this call).
  const int nb = int(ins.size());
  std::vector<nvinfer1::DynamicPluginTensorDesc> io;
  auto wild = [&](nvinfer1::Dims d) {
    d.d[0] = -1;
    d.d[bhsd ? 2 : 1] = -1;
    return d;
  };
  auto one = [&](nvinfer1::Dims d) {
    d.d[0] = 1;
    d.d[bhsd ? 2 : 1] = 1;
    return d;
  };
  for (const auto& t : ins) io.push_back(dynamic(wild(dims_of(t)), one(dims_of(t)), dims_of(t), type));
  io.push_back(dynamic(wild(dims_of(out_shape)), one(dims_of(out_shape)), dims_of(out_shape), type));
  auto* b = build(p.get());
  for (int pos = 0; pos <= nb; ++pos) ASSERT_TRUE(b->supportsFormatCombination(pos, io.data(), nb, 1)) << pos;
  ASSERT_EQ(b->configurePlugin(io.data(), nb, io.data() + nb, 1), 0) << Library::get().messages.last_error();
  const size_t ws_bytes = b->getWorkspaceSize(io.data(), nb, io.data() + nb, 1);

  // Runtime: the engine's copy of the plugin, attached to a context.
  PluginPtr engine(cr->createPlugin("gpu_case", runtime(p.get())->getFieldsToSerialize(),
                                    nvinfer1::TensorRTPhase::kRUNTIME));
  ASSERT_NE(engine, nullptr);
  Recorder rec;
  ResourceContext ctx;
  ctx.recorder = &rec;
  PluginPtr attached(runtime(engine.get())->attachToContext(&ctx));
  ASSERT_NE(attached, nullptr);
  auto* rt = runtime(attached.get());

  std::vector<std::unique_ptr<DeviceBuffer>> dev;
  std::vector<const void*> in_ptrs;
  std::vector<nvinfer1::PluginTensorDesc> in_desc;
  for (const auto& t : ins) {
    dev.push_back(std::make_unique<DeviceBuffer>(bytes_of(t), t.data()));
    in_ptrs.push_back(dev.back()->ptr);
    in_desc.push_back(desc(dims_of(t), type));
  }
  DeviceBuffer out(bytes_of(out_shape));  // poisoned with NaN
  DeviceBuffer ws(ws_bytes);              // poisoned too: the library must not read it unwritten
  void* outputs[1] = {out.ptr};
  const nvinfer1::PluginTensorDesc out_desc = desc(dims_of(out_shape), type);
  ASSERT_EQ(rt->onShapeChange(in_desc.data(), nb, &out_desc, 1), 0);

  // The workspace TensorRT allocated is the library's for this very call: its tensors as views
  // of the device buffers in the node's layout (written out here independently of the plugin).
  {
    fa_params lib = pr.params();
    lib.lse = fa_tensor{};
    const int64_t bq = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hk = c.heads_kv, d = c.head_dim;
    auto set = [&](fa_tensor& t, const void* data, int64_t s, int64_t h, std::array<int64_t, 4> stride) {
      t.data = const_cast<void*>(data);
      t.shape[0] = bq, t.shape[1] = s, t.shape[2] = h, t.shape[3] = d;
      for (int i = 0; i < 4; ++i) t.stride[i] = stride[size_t(i)];
      t.device = fa::cuda_device(0);
    };
    if (is_packed) {
      const int64_t row = (hq + 2 * hk) * d;
      const char* base = static_cast<const char*>(in_ptrs[0]);
      set(lib.q, base, sq, hq, {sq * row, row, d, 1});
      set(lib.k, base + hq * d * 2, sk, hk, {sk * row, row, d, 1});
      set(lib.v, base + (hq + hk) * d * 2, sk, hk, {sk * row, row, d, 1});
      set(lib.out, out.ptr, sq, hq, {sq * hq * d, hq * d, d, 1});
    } else if (bhsd) {
      set(lib.q, in_ptrs[0], sq, hq, {hq * sq * d, d, sq * d, 1});
      set(lib.k, in_ptrs[1], sk, hk, {hk * sk * d, d, sk * d, 1});
      set(lib.v, in_ptrs[2], sk, hk, {hk * sk * d, d, sk * d, 1});
      set(lib.out, out.ptr, sq, hq, {hq * sq * d, d, sq * d, 1});
    } else {
      set(lib.q, in_ptrs[0], sq, hq, {sq * hq * d, hq * d, d, 1});
      set(lib.k, in_ptrs[1], sk, hk, {sk * hk * d, hk * d, d, 1});
      set(lib.v, in_ptrs[2], sk, hk, {sk * hk * d, hk * d, d, 1});
      set(lib.out, out.ptr, sq, hq, {sq * hq * d, hq * d, d, 1});
    }
    size_t need = 0;
    ASSERT_EQ(fa_forward_workspace_size(&lib, &need), FA_OK) << fa_last_error();
    EXPECT_EQ(ws_bytes, need);
  }

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const int32_t rc = rt->enqueue(in_desc.data(), &out_desc, in_ptrs.data(), outputs, ws.ptr, stream);
  const cudaError_t sync = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  ASSERT_EQ(rc, 0) << (rec.errors.empty() ? "" : rec.errors.back().second);
  ASSERT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  EXPECT_TRUE(rec.errors.empty()) << rec.errors.front().second;

  HostTensor got(c.dtype, out_shape.shape());
  ASSERT_EQ(cudaMemcpy(got.data(), out.ptr, bytes_of(got), cudaMemcpyDeviceToHost), cudaSuccess);
  // back to (b, s, h, d) in pr.out
  const auto& s = pr.out.shape();
  for (int64_t bi = 0; bi < s[0]; ++bi)
    for (int64_t i = 0; i < s[1]; ++i)
      for (int64_t h = 0; h < s[2]; ++h)
        for (int64_t e = 0; e < s[3]; ++e) {
          const int64_t at = bhsd ? ((bi * s[2] + h) * s[1] + i) * s[3] + e : ((bi * s[1] + i) * s[2] + h) * s[3] + e;
          pr.out.set(((bi * s[1] + i) * s[2] + h) * s[3] + e, got.get(at));
        }
  const fa::test::Dense ref = fa::test::reference(pr, false, false);
  const fa::test::Dense naive = fa::test::reference(pr, true, false, /*round_p=*/true);
  fa::test::expect_rule("out", fa::test::outputs(pr, false).out, ref.out, naive.out, 2, 1e-5);
#endif
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuTrtPlugin, ::testing::ValuesIn(grid()), [](const auto& info) {
  return std::to_string(info.index) + "_" + info.param.layout + "_" + info.param.c.name();
});

// A profile whose largest shapes exceed the call's: the workspace is enough for the smaller call
// (TensorRT sizes it once, at the largest shapes).
TEST(GpuTrtPluginWorkspace, LargestShapesCoverSmallerCalls) {
  std::string why;
  if (fa::test::skip_without_gpu(&why) || fa::test::skip_head_dim_not_built(64, &why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  Fields f;
  f.i("causal", 1).s("layout", "bshd");
  PluginPtr p(creator("flashattn")->createPlugin("ws", f.collection(), nvinfer1::TensorRTPhase::kBUILD));
  ASSERT_NE(p, nullptr);
  auto* b = build(p.get());
  size_t previous = 0;
  for (int64_t s_max : {1, 64, 1000, 4096}) {
    std::vector<nvinfer1::DynamicPluginTensorDesc> io;
    for (int64_t h : {8, 2, 2, 8})
      io.push_back(dynamic(dims({-1, -1, h, 64}), dims({1, 1, h, 64}), dims({4, s_max, h, 64}), DataType::kHALF));
    ASSERT_EQ(b->configurePlugin(io.data(), 3, io.data() + 3, 1), 0) << Library::get().messages.last_error();
    const size_t bytes = b->getWorkspaceSize(io.data(), 3, io.data() + 3, 1);
    EXPECT_GE(bytes, previous) << "s_max=" << s_max;
    previous = bytes;
  }
#endif
}

// What the library cannot run on this GPU is refused while the engine is built, with its reason:
// here a profile whose largest batch exceeds what the CUDA kernels' grid takes (65535).
TEST(GpuTrtPluginConfigure, RefusesWhatTheKernelsCannotRun) {
  std::string why;
  if (fa::test::skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  PluginPtr p(creator("flashattn")->createPlugin("big", Fields().collection(), nvinfer1::TensorRTPhase::kBUILD));
  ASSERT_NE(p, nullptr);
  std::vector<nvinfer1::DynamicPluginTensorDesc> io;
  for (int i = 0; i < 4; ++i)
    io.push_back(dynamic(dims({-1, -1, 4, 64}), dims({1, 1, 4, 64}), dims({70000, 16, 4, 64}), DataType::kHALF));
  const size_t before = Library::get().messages.errors().size();
  EXPECT_NE(build(p.get())->configurePlugin(io.data(), 3, io.data() + 3, 1), 0);
  ASSERT_EQ(Library::get().messages.errors().size(), before + 1);
  const std::string msg = Library::get().messages.last_error();
  EXPECT_NE(msg.find("at the profile's largest shapes: the library refuses the call"), std::string::npos) << msg;
  EXPECT_NE(msg.find("65535"), std::string::npos) << msg;
  // A profile within the limit is accepted.
  for (auto& d : io) d.max.d[0] = 65535;
  EXPECT_EQ(build(p.get())->configurePlugin(io.data(), 3, io.data() + 3, 1), 0) << Library::get().messages.last_error();
#endif
}

// Keys of length 0: every row sees no key and is 0 (the library's rule), written by the plugin.
TEST(GpuTrtPluginEmpty, NoKeysGiveZeros) {
  std::string why;
  if (fa::test::skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  PluginPtr p(creator("flashattn")->createPlugin("empty", Fields().collection(), nvinfer1::TensorRTPhase::kBUILD));
  ASSERT_NE(p, nullptr);
  const size_t n = 2 * 5 * 4 * 64;
  std::vector<uint16_t> host(n, 0x3c00);
  DeviceBuffer q(n * 2, host.data()), k(0), v(0), out(n * 2);
  const nvinfer1::PluginTensorDesc in[3] = {desc(dims({2, 5, 4, 64}), DataType::kHALF),
                                            desc(dims({2, 0, 4, 64}), DataType::kHALF),
                                            desc(dims({2, 0, 4, 64}), DataType::kHALF)};
  const nvinfer1::PluginTensorDesc o = desc(dims({2, 5, 4, 64}), DataType::kHALF);
  const void* inputs[3] = {q.ptr, k.ptr, v.ptr};
  void* outputs[1] = {out.ptr};
  ASSERT_EQ(runtime(p.get())->enqueue(in, &o, inputs, outputs, nullptr, nullptr), 0)
      << Library::get().messages.last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), out.ptr, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint16_t x) { return x == 0; }));
#endif
}

}  // namespace
}  // namespace fa_trt_test
