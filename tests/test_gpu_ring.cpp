// Ring attention on CUDA tensors (flashattn/ring.h) on one GPU: R ranks are R host threads, each
// with its own stream, its shard in device memory and a device workspace it allocated, exchanging
// K / V blocks and dK / dV sums through the in-process device communicator of
// ring_device_comm.h (cudaMemcpyAsync between the ranks' buffers, ordered by events). The shards'
// results, put back together, must meet FlashAttention's rule against the fp64 reference of the
// whole sequence as the other GPU tests do (2 x the same-precision naive error + 1e-5 for out and
// lse, 3 x + 1e-4 for the gradients; naive with P rounded to 16 bits). Outputs are poisoned
// (NaN) before the run; lengths are not multiples of R or 2R. Skipped without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu_support.h"
#include "ring_comm.h"
#include "ring_shards.h"

#ifdef FA_TEST_CUDA
#include "ring_device_comm.h"
#endif

namespace fa::test {
namespace {

// R ranks over L rows of one sequence, 2 heads of 64.
RingCase small_case(int32_t ranks, fa_dtype dt, int64_t L) {
  RingCase rc;
  rc.ranks = ranks;
  rc.c.dtype = dt;
  rc.c.seqlen_q = rc.c.seqlen_k = L;
  rc.c.heads_q = 2;
  rc.c.head_dim = 64;
  return rc;
}

std::vector<RingCase> gpu_ring_grid() {
  const int64_t lens[] = {37, 101, 389, 777};
  const int64_t dims[] = {64, 128, 40};
  std::vector<RingCase> cases =
      ring_grid({FA_DTYPE_BF16, FA_DTYPE_FP16}, [&](Case& c, uint64_t n) {
        c.seed = 1000 + n;
        c.batch = 1 + int64_t(n % 2);
        c.heads_kv = 1 + int64_t(n % 2);
        c.heads_q = c.heads_kv * (n % 3 == 0 ? 1 : 4);  // GQA 4:1 in two cases of three
        c.head_dim = dims[n % 3];
        c.seqlen_q = c.seqlen_k = lens[n % 4];
      });
  uint64_t n = cases.size();
  // One rank (no transfer), and softcap with a given scale.
  RingCase one = small_case(1, FA_DTYPE_BF16, 129);
  one.c.causal = true;
  one.c.seed = 1000 + ++n;
  cases.push_back(one);
  RingCase cap = one;
  cap.ranks = 3;
  cap.c.dtype = FA_DTYPE_FP16;
  cap.c.softcap = 5.f;
  cap.c.softmax_scale = 0.2f;
  cap.c.seed = 1000 + ++n;
  cases.push_back(cap);
  return cases;
}

#ifdef FA_TEST_CUDA

// One rank's device tensors (mirrors of its host shard), params, stream and workspaces.
struct DeviceShard {
  DeviceTensor q, k, v, out, lse, dout, dq, dk, dv;
  fa_params p;      // the forward's
  fa_params grads;  // the backward's: p with dout, dq, dk, dv
  cudaStream_t stream = nullptr;

  DeviceShard(const Shard& s, const Case& c)
      : q(s.q, false), k(s.k, false), v(s.v, false), out(s.out, true), lse(s.lse, true),
        dout(s.dout, false), dq(s.dq, true), dk(s.dk, true), dv(s.dv, true) {
    p = fa::make_params(s.q.view(), s.k.view(), s.v.view(), s.out.view(), s.lse.view(),
                        s.options(c));
    p.q = q.view(); p.k = k.view(); p.v = v.view(); p.out = out.view(); p.lse = lse.view();
    grads = p;
    grads.dout = dout.view(); grads.dq = dq.view(); grads.dk = dk.view(); grads.dv = dv.view();
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  }
  ~DeviceShard() { cudaStreamDestroy(stream); }
  void copy_back(Shard& s) const {
    out.copy_to(s.out);
    lse.copy_to(s.lse);
    dq.copy_to(s.dq);
    dk.copy_to(s.dk);
    dv.copy_to(s.dv);
  }
};

// A device allocation of the bytes a query asked for.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes_ ? bytes_ : 1), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

// Forward, then backward, on rank r's stream; the host waits for the stream only at the end.
void run_rank(DeviceShard& d, const RingCase& rc, DeviceRing::Rank& comm, std::string* error) {
  const fa::RingOptions ro{rc.c.seqlen_q, rc.layout};
  try {
    // Both workspaces first: cudaFree synchronises the device, so none is freed mid-run.
    DeviceBuffer fwd(fa::ring_forward_workspace_size(d.p, ro, comm));
    DeviceBuffer bwd(fa::ring_backward_workspace_size(d.grads, ro, comm));
    fa::ring_forward(d.p, ro, comm, fwd.data(), fwd.size(), d.stream);
    fa::ring_backward(d.grads, ro, comm, bwd.data(), bwd.size(), d.stream);
    const cudaError_t e = cudaStreamSynchronize(d.stream);
    if (e != cudaSuccess) *error = std::string("stream: ") + cudaGetErrorString(e);
  } catch (const std::exception& e) {
    *error = e.what();
    cudaStreamSynchronize(d.stream);
  }
}

#endif

class GpuRing : public ::testing::TestWithParam<RingCase> {};

TEST_P(GpuRing, ShardsTogetherMatchReference) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  const RingCase& rc = GetParam();
  if (skip_head_dim_not_built(rc.c.head_dim, &why)) GTEST_SKIP() << why;
  Problem pr(rc.c);
  std::vector<Shard> shards;
  for (int32_t r = 0; r < rc.ranks; ++r) shards.emplace_back(pr, rc, r);
  std::vector<std::unique_ptr<DeviceShard>> dev;
  for (const Shard& s : shards) dev.push_back(std::make_unique<DeviceShard>(s, rc.c));
  std::vector<std::string> errors(size_t(rc.ranks));
  std::vector<int> starts(size_t(rc.ranks));
  size_t in_flight = 0;
  {
    DeviceRing ring(rc.ranks);
    on_ranks(rc.ranks, [&](int32_t r) {
      DeviceRing::Rank comm(ring, r);
      run_rank(*dev[size_t(r)], rc, comm, &errors[size_t(r)]);
      starts[size_t(r)] = comm.starts();
    });
    in_flight = ring.in_flight();
  }
  for (int32_t r = 0; r < rc.ranks; ++r) {
    ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
    EXPECT_EQ(starts[size_t(r)], rc.ranks == 1 ? 0 : 3 * (rc.ranks - 1) + 1) << "rank " << r;
  }
  EXPECT_EQ(in_flight, 0u) << "every offer taken, every copy acknowledged";

  pr.poison_outputs();
  for (size_t r = 0; r < shards.size(); ++r) {
    dev[r]->copy_back(shards[r]);
    shards[r].gather(pr);
  }
  const Dense got = outputs(pr, true);
  const Dense ref = reference(pr, false, true);
  const Dense naive = reference(pr, true, true, /*round_p=*/true);
  expect_rules(got, ref, naive);
#endif
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuRing, ::testing::ValuesIn(gpu_ring_grid()), RingCaseName());

// A CUDA ring call the kernels cannot take (fp32 tensors) or without a workspace is refused
// before any transfer: the status names the argument, nothing is written, nothing is sent.
TEST(GpuRingErrors, RefusedBeforeAnyTransfer) {
  std::string why;
  if (skip_without_gpu(&why)) GTEST_SKIP() << why;
#ifdef FA_TEST_CUDA
  for (fa_dtype dt : {FA_DTYPE_FP32, FA_DTYPE_BF16}) {
    SCOPED_TRACE(dt == FA_DTYPE_FP32 ? "fp32" : "bf16 without workspace");
    const RingCase rc = small_case(2, dt, 45);
    Problem pr(rc.c);
    Shard s(pr, rc, 0);
    DeviceShard d(s, rc.c);
    DeviceRing ring(2);
    DeviceRing::Rank comm(ring, 0);
    const fa_ring r = fa::make_ring({rc.c.seqlen_q, rc.layout}, comm.raw());
    DeviceBuffer ws(1 << 20);
    const fa_status st =
        fa_ring_forward(&d.p, &r, dt == FA_DTYPE_FP32 ? ws.data() : nullptr, ws.size(), d.stream);
    const std::string msg = fa_last_error();
    if (dt == FA_DTYPE_FP32) {
      EXPECT_EQ(st, FA_ERROR_UNSUPPORTED) << msg;
      EXPECT_NE(msg.find("q.dtype=fp32"), std::string::npos) << msg;
    } else {
      EXPECT_EQ(st, FA_ERROR_WORKSPACE) << msg;
      EXPECT_NE(msg.find("fa_ring_forward_workspace_size"), std::string::npos) << msg;
    }
    EXPECT_EQ(comm.starts(), 0);
    ASSERT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
    const auto got = d.out.bytes(s.out);  // DeviceTensor poisoned it with 0xFF bytes
    EXPECT_EQ(got, std::vector<unsigned char>(got.size(), 0xFF)) << "a refused call wrote out";
  }
#endif
}

}  // namespace
}  // namespace fa::test
