// libfa_ort_flashattn: an ONNX Runtime custom-op library serving FlashAttention (domain
// "flashattn") with libflashattn's C ABI. Load it with
//   so = onnxruntime.SessionOptions(); so.register_custom_ops_library(".../libfa_ort_flashattn.so")
// The CPU kernel runs the library's CPU backend; a build with CUDA also registers the op for
// CUDAExecutionProvider, where the tensors are device pointers and the call runs on ORT's stream.
// Attributes and layouts: tools/onnx-fuse/fuse.h and docs/onnx.md.
#include <cstring>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "ort_abi.h"

#if FA_CHECK_ORT_ABI
#include "ort_abi_check.h"
#endif
#if FA_ORT_OP_CUDA
#include <cuda_runtime.h>
#endif

using namespace fa_ort;

namespace {

const OrtApi* g_api = nullptr;

struct OpError {
  std::string msg;
};

void check(OrtStatus* s, const char* what) {
  if (s) {
    slot<ReleaseStatusFn>(g_api, Slot::ReleaseStatus)(s);
    throw OpError{std::string("onnxruntime call failed: ") + what};
  }
}

struct Kernel {
  int64_t causal = 0, window_left = -1, window_right = -1, num_heads = 0, num_kv_heads = 0;
  float softcap = 0, scale = 0;
  std::string layout = "bshd";
  bool cuda = false;
};

int64_t get_int(const OrtKernelInfo* info, const char* name, int64_t dflt) {
  int64_t v = dflt;
  OrtStatus* s = slot<KernelInfoGetAttribute_int64Fn>(g_api, Slot::KernelInfoGetAttribute_int64)(info, name, &v);
  if (s) {
    slot<ReleaseStatusFn>(g_api, Slot::ReleaseStatus)(s);
    return dflt;
  }
  return v;
}

float get_float(const OrtKernelInfo* info, const char* name, float dflt) {
  float v = dflt;
  OrtStatus* s = slot<KernelInfoGetAttribute_floatFn>(g_api, Slot::KernelInfoGetAttribute_float)(info, name, &v);
  if (s) {
    slot<ReleaseStatusFn>(g_api, Slot::ReleaseStatus)(s);
    return dflt;
  }
  return v;
}

std::string get_string(const OrtKernelInfo* info, const char* name, const std::string& dflt) {
  auto fn = slot<KernelInfoGetAttribute_stringFn>(g_api, Slot::KernelInfoGetAttribute_string);
  size_t size = 0;
  OrtStatus* s = fn(info, name, nullptr, &size);
  if (s) {
    slot<ReleaseStatusFn>(g_api, Slot::ReleaseStatus)(s);
    return dflt;
  }
  std::string v(size, '\0');
  check(fn(info, name, v.data(), &size), "KernelInfoGetAttribute_string");
  v.resize(std::strlen(v.c_str()));
  return v;
}

struct TensorArg {
  void* data = nullptr;
  int type = 0;
  std::vector<int64_t> dims;
};

TensorArg input(OrtKernelContext* ctx, size_t i) {
  const OrtValue* v = nullptr;
  check(slot<KernelContext_GetInputFn>(g_api, Slot::KernelContext_GetInput)(ctx, i, &v), "GetInput");
  if (!v) throw OpError{"input " + std::to_string(i) + " is missing"};
  TensorArg t;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(slot<GetTensorTypeAndShapeFn>(g_api, Slot::GetTensorTypeAndShape)(v, &info), "GetTensorTypeAndShape");
  size_t n = 0;
  OrtStatus* s1 = slot<GetTensorElementTypeFn>(g_api, Slot::GetTensorElementType)(info, &t.type);
  OrtStatus* s2 = slot<GetDimensionsCountFn>(g_api, Slot::GetDimensionsCount)(info, &n);
  t.dims.resize(n);
  OrtStatus* s3 = s2 ? nullptr : slot<GetDimensionsFn>(g_api, Slot::GetDimensions)(info, t.dims.data(), n);
  slot<ReleaseTensorTypeAndShapeInfoFn>(g_api, Slot::ReleaseTensorTypeAndShapeInfo)(info);
  check(s1, "GetTensorElementType");
  check(s2, "GetDimensionsCount");
  check(s3, "GetDimensions");
  check(slot<GetTensorMutableDataFn>(g_api, Slot::GetTensorMutableData)(const_cast<OrtValue*>(v), &t.data),
        "GetTensorMutableData");
  return t;
}

fa_dtype to_fa(int type) {
  switch (type) {
    case kFloat: return FA_DTYPE_FP32;
    case kFloat16: return FA_DTYPE_FP16;
    case kBfloat16: return FA_DTYPE_BF16;
    default: throw OpError{"FlashAttention: element type " + std::to_string(type) + " is not fp32 / fp16 / bf16"};
  }
}

// A (b, s, h, d) view, given its strides, at an element offset.
fa_tensor view(void* base, fa_dtype dt, size_t esz, int64_t offset, const int64_t shape[4], const int64_t stride[4],
               bool cuda) {
  fa_tensor t{};
  t.data = static_cast<char*>(base) + offset * int64_t(esz);
  t.dtype = dt;
  t.rank = 4;
  for (int k = 0; k < 4; ++k) {
    t.shape[k] = shape[k];
    t.stride[k] = stride[k];
  }
  t.device.type = cuda ? FA_DEVICE_CUDA : FA_DEVICE_CPU;
  return t;
}

void compute(const Kernel& k, OrtKernelContext* ctx) {
  size_t count = 0;
  check(slot<KernelContext_GetInputCountFn>(g_api, Slot::KernelContext_GetInputCount)(ctx, &count), "GetInputCount");
  fa_params p;
  fa_params_init(&p);
  p.causal = int32_t(k.causal);
  p.window_left = int32_t(k.window_left);
  p.window_right = int32_t(k.window_right);
  p.softcap = k.softcap;
  p.softmax_scale = k.scale;
  int64_t out_dims[4];
  std::vector<int64_t> ort_out_dims;
  fa_dtype dt;
  size_t esz;
  TensorArg q = input(ctx, 0);
  dt = to_fa(q.type);
  esz = dt == FA_DTYPE_FP32 ? 4 : 2;
  if (k.layout == "packed_qkv") {
    if (q.dims.size() != 3) throw OpError{"FlashAttention packed_qkv: input must be (batch, seq, features)"};
    const int64_t hq = k.num_heads, hk = k.num_kv_heads;
    if (hq <= 0 || hk <= 0 || q.dims[2] % (hq + 2 * hk) != 0)
      throw OpError{"FlashAttention packed_qkv: features " + std::to_string(q.dims[2]) +
                    " is not (num_heads + 2 num_kv_heads) * head_dim"};
    const int64_t b = q.dims[0], s = q.dims[1], d = q.dims[2] / (hq + 2 * hk), row = q.dims[2];
    const int64_t st[4] = {s * row, row, d, 1};
    const int64_t qs[4] = {b, s, hq, d}, ks[4] = {b, s, hk, d};
    p.q = view(q.data, dt, esz, 0, qs, st, k.cuda);
    p.k = view(q.data, dt, esz, hq * d, ks, st, k.cuda);
    p.v = view(q.data, dt, esz, (hq + hk) * d, ks, st, k.cuda);
  } else {
    if (count < 3) throw OpError{"FlashAttention: layout " + k.layout + " takes q, k, v"};
    TensorArg kk = input(ctx, 1), vv = input(ctx, 2);
    const TensorArg* ts[3] = {&q, &kk, &vv};
    fa_tensor* ps[3] = {&p.q, &p.k, &p.v};
    for (int i = 0; i < 3; ++i) {
      const auto& t = *ts[i];
      if (t.dims.size() != 4) throw OpError{"FlashAttention: q, k, v must be 4-D"};
      if (t.type != q.type) throw OpError{"FlashAttention: q, k, v must have one type"};
      const int64_t* dm = t.dims.data();
      int64_t shape[4], stride[4];
      if (k.layout == "bshd") {  // contiguous (b, s, h, d)
        const int64_t s4[4] = {dm[0], dm[1], dm[2], dm[3]};
        const int64_t st[4] = {dm[1] * dm[2] * dm[3], dm[2] * dm[3], dm[3], 1};
        std::memcpy(shape, s4, sizeof shape);
        std::memcpy(stride, st, sizeof stride);
      } else if (k.layout == "bhsd") {  // contiguous (b, h, s, d) seen as (b, s, h, d)
        const int64_t s4[4] = {dm[0], dm[2], dm[1], dm[3]};
        const int64_t st[4] = {dm[1] * dm[2] * dm[3], dm[3], dm[2] * dm[3], 1};
        std::memcpy(shape, s4, sizeof shape);
        std::memcpy(stride, st, sizeof stride);
      } else {
        throw OpError{"FlashAttention: unknown layout '" + k.layout + "'"};
      }
      *ps[i] = view(t.data, dt, esz, 0, shape, stride, k.cuda);
    }
  }
  const int64_t b = p.q.shape[0], s = p.q.shape[1], h = p.q.shape[2], d = p.q.shape[3];
  if (k.layout == "bhsd") ort_out_dims = {b, h, s, d};
  else ort_out_dims = {b, s, h, d};
  OrtValue* out = nullptr;
  check(slot<KernelContext_GetOutputFn>(g_api, Slot::KernelContext_GetOutput)(ctx, 0, ort_out_dims.data(), 4, &out),
        "GetOutput");
  void* out_data = nullptr;
  check(slot<GetTensorMutableDataFn>(g_api, Slot::GetTensorMutableData)(out, &out_data), "GetTensorMutableData");
  if (k.layout == "bhsd") {
    const int64_t st[4] = {h * s * d, d, s * d, 1};
    out_dims[0] = b, out_dims[1] = s, out_dims[2] = h, out_dims[3] = d;
    p.out = view(out_data, dt, esz, 0, out_dims, st, k.cuda);
  } else {
    const int64_t st[4] = {s * h * d, h * d, d, 1};
    out_dims[0] = b, out_dims[1] = s, out_dims[2] = h, out_dims[3] = d;
    p.out = view(out_data, dt, esz, 0, out_dims, st, k.cuda);
  }
  if (b * h * s == 0) return;
  // LSE: the library's (batch, heads, seqlen_q) fp32, in memory of our own.
  const size_t lse_elems = size_t(b * h * s);
  size_t ws = 0;
  auto fail = [](const char* what) { throw OpError{std::string("FlashAttention: ") + what + ": " + fa_last_error()}; };
  p.lse.dtype = FA_DTYPE_FP32;
  p.lse.rank = 3;
  p.lse.shape[0] = b, p.lse.shape[1] = h, p.lse.shape[2] = s;
  p.lse.stride[0] = h * s, p.lse.stride[1] = s, p.lse.stride[2] = 1;
  p.lse.device = p.q.device;
#if FA_ORT_OP_CUDA
  if (k.cuda) {
    void* stream = nullptr;
    check(slot<KernelContext_GetGPUComputeStreamFn>(g_api, Slot::KernelContext_GetGPUComputeStream)(ctx, &stream),
          "GetGPUComputeStream");
    auto cs = static_cast<cudaStream_t>(stream);
    void* lse = nullptr;
    void* work = nullptr;
    if (cudaMallocAsync(&lse, lse_elems * sizeof(float), cs) != cudaSuccess)
      throw OpError{"FlashAttention: cudaMallocAsync failed"};
    p.lse.data = lse;
    fa_status st = fa_forward_workspace_size(&p, &ws);
    if (st == FA_OK && ws > 0 && cudaMallocAsync(&work, ws, cs) != cudaSuccess) st = FA_ERROR_CUDA;
    if (st == FA_OK) st = fa_forward(&p, work, ws, stream);
    if (work) cudaFreeAsync(work, cs);
    cudaFreeAsync(lse, cs);
    if (st != FA_OK) fail("forward");
    return;
  }
#endif
  std::vector<float> lse(lse_elems);
  p.lse.data = lse.data();
  if (fa_forward_workspace_size(&p, &ws) != FA_OK) fail("workspace query");
  std::vector<unsigned char> work(ws);
  if (fa_forward(&p, ws ? work.data() : nullptr, ws, nullptr) != FA_OK) fail("forward");
}

// ---- the OrtCustomOp callbacks -----------------------------------------------------------

// One registration per element type and provider: ONNX Runtime infers an output type from at most
// one untyped input, so each variant declares its type (the runtime picks by the inputs' type).
struct Op {
  OrtCustomOp base;  // first: ORT passes &base back
  bool cuda;
  int type;
};

OrtStatus* create_kernel(const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info, void** out) {
  try {
    auto* k = new Kernel;
    k->causal = get_int(info, "causal", 0);
    k->window_left = get_int(info, "window_left", -1);
    k->window_right = get_int(info, "window_right", -1);
    k->num_heads = get_int(info, "num_heads", 0);
    k->num_kv_heads = get_int(info, "num_kv_heads", 0);
    k->softcap = get_float(info, "softcap", 0.f);
    k->scale = get_float(info, "scale", 0.f);
    k->layout = get_string(info, "layout", "bshd");
    k->cuda = reinterpret_cast<const Op*>(op)->cuda;
    *out = k;
    return nullptr;
  } catch (const OpError& e) {
    return slot<CreateStatusFn>(g_api, Slot::CreateStatus)(kFail, e.msg.c_str());
  }
}

OrtStatus* compute_v2(void* kernel, OrtKernelContext* ctx) {
  try {
    compute(*static_cast<Kernel*>(kernel), ctx);
    return nullptr;
  } catch (const OpError& e) {
    return slot<CreateStatusFn>(g_api, Slot::CreateStatus)(kFail, e.msg.c_str());
  } catch (const std::exception& e) {
    return slot<CreateStatusFn>(g_api, Slot::CreateStatus)(kFail, e.what());
  }
}

void destroy_kernel(void* kernel) { delete static_cast<Kernel*>(kernel); }
const char* op_name(const OrtCustomOp*) { return "FlashAttention"; }
const char* cpu_ep(const OrtCustomOp*) { return "CPUExecutionProvider"; }
const char* cuda_ep(const OrtCustomOp*) { return "CUDAExecutionProvider"; }
int op_type(const OrtCustomOp* op, size_t) { return reinterpret_cast<const Op*>(op)->type; }
size_t three(const OrtCustomOp*) { return 3; }
size_t one(const OrtCustomOp*) { return 1; }
int input_characteristic(const OrtCustomOp*, size_t i) { return i == 0 ? kRequired : kOptional; }
int output_characteristic(const OrtCustomOp*, size_t) { return kRequired; }
int default_memory(const OrtCustomOp*, size_t) { return 0; }
int min_arity(const OrtCustomOp*) { return 1; }
int homogeneous(const OrtCustomOp*) { return 0; }

Op make_op(bool cuda, int type) {
  Op op{};
  OrtCustomOp& b = op.base;
  b.version = kCustomOpVersion;
  b.GetName = op_name;
  b.GetExecutionProviderType = cuda ? cuda_ep : cpu_ep;
  b.GetInputType = op_type;
  b.GetInputTypeCount = three;
  b.GetOutputType = op_type;
  b.GetOutputTypeCount = one;
  b.KernelDestroy = destroy_kernel;
  b.GetInputCharacteristic = input_characteristic;
  b.GetOutputCharacteristic = output_characteristic;
  b.GetInputMemoryType = default_memory;
  b.GetVariadicInputMinArity = min_arity;
  b.GetVariadicInputHomogeneity = homogeneous;
  b.GetVariadicOutputMinArity = min_arity;
  b.GetVariadicOutputHomogeneity = homogeneous;
  b.CreateKernelV2 = create_kernel;
  b.KernelComputeV2 = compute_v2;
  op.cuda = cuda;
  op.type = type;
  return op;
}

Op g_ops[] = {
    make_op(false, kFloat), make_op(false, kFloat16), make_op(false, kBfloat16),
#if FA_ORT_OP_CUDA
    make_op(true, kFloat16), make_op(true, kBfloat16),
#endif
};

}  // namespace

// ONNX Runtime calls this when the library is registered with the session options.
extern "C" __attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                               const OrtApiBase* base) {
  const OrtApi* api = base->GetApi(kApiVersion);
  if (!api) return nullptr;  // a runtime older than 1.16: nothing can be reported through it
  g_api = api;
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* s = slot<CreateCustomOpDomainFn>(api, Slot::CreateCustomOpDomain)("flashattn", &domain)) return s;
  for (auto& op : g_ops)
    if (OrtStatus* s = slot<CustomOpDomain_AddFn>(api, Slot::CustomOpDomain_Add)(domain, &op.base)) return s;
  return slot<AddCustomOpDomainFn>(api, Slot::AddCustomOpDomain)(options, domain);
}
