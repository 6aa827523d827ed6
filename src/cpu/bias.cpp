#include "cpu/bias.h"

#include "core/dtype.h"

namespace fa::cpu {

Checked dbias_partial_elems(const Params& p) {
  if (p.bias.grad == nullptr) return 0;
  return Checked(p.batch) * p.heads_q * p.bias.grad_shape[2] * p.bias.grad_shape[3];
}

template <typename Acc>
void reduce_dbias(const Params& p, const Acc* partials, int threads) {
  const Params::Bias& g = p.bias;
  const int64_t gb = g.grad_shape[0], gh = g.grad_shape[1], rows = g.grad_shape[2],
                cols = g.grad_shape[3];
  // The tasks (b, h) that element (eb, eh, ., .) sums: all of a dimension dbias has as 1.
  const int64_t nb = gb == 1 ? p.batch : 1, nh = gh == 1 ? p.heads_q : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t e = 0; e < gb * gh * rows; ++e) {
    const int64_t i = e % rows, eh = (e / rows) % gh, eb = e / (rows * gh);
    for (int64_t j = 0; j < cols; ++j) {
      Acc sum = 0;
      for (int64_t tb = 0; tb < nb; ++tb)
        for (int64_t th = 0; th < nh; ++th) {
          const int64_t b = gb == 1 ? tb : eb, h = gh == 1 ? th : eh;
          sum += dbias_partial(p, partials, b, h)[i * cols + j];
        }
      const int64_t o = eb * g.grad_stride[0] + eh * g.grad_stride[1] + i * g.grad_stride[2] +
                        j * g.grad_stride[3];
      switch (g.grad_dtype) {
        case DType::F32: static_cast<float*>(g.grad)[o] = float(sum); break;
        case DType::F16: static_cast<half_t*>(g.grad)[o] = to_half(float(sum)); break;
        case DType::BF16: static_cast<bfloat16_t*>(g.grad)[o] = to_bf16(float(sum)); break;
        case DType::F64: static_cast<double*>(g.grad)[o] = double(sum); break;  // the oracle's
        case DType::E4M3: break;  // never a dbias dtype (validation: fp32 or the bias's)
      }
    }
  }
}

template void reduce_dbias<float>(const Params&, const float*, int);
template void reduce_dbias<double>(const Params&, const double*, int);

}  // namespace fa::cpu
