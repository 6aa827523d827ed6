#include "cpu/combine.h"

#include <omp.h>

#include <algorithm>

#include "core/combine.h"
#include "cpu/element.h"

namespace fa::cpu {

void combine(const Params& p, const Partial* parts, int64_t n, int threads) {
  const int64_t d = p.head_dim;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < p.batch * p.heads_q; ++t) {
    const int64_t b = t / p.heads_q, h = t % p.heads_q;
    const SeqInfo sq = p.seq(b);
    double o[FA_MAX_HEAD_DIM];  // validated: head_dim <= FA_MAX_HEAD_DIM
    for (int64_t i = 0; i < sq.len_q; ++i) {
      const int64_t row = sq.q_start + i;
      const auto lse_of = [&](int64_t part) { return double(parts[part].lse.at(b, h, row)); };
      const double lse = merged_lse<double>(lse_of, n);
      std::fill(o, o + d, 0.0);
      for (int64_t part = 0; part < n; ++part) {
        const double w = part_weight(lse_of(part), lse);
        if (w == 0.0) continue;  // an empty part (or one too light to count): O not read
        const View& out = parts[part].out;
        const void* src = row_of(out, b, row, h);
        for (int64_t c = 0; c < d; ++c) o[c] += w * load_element(out.dtype, src, c);
      }
      for (int64_t c = 0; c < d; ++c) store_element(p.out, b, row, h, c, o[c]);
      if (p.lse.data) p.lse.at(b, h, row) = float(lse);
    }
  }
}

}  // namespace fa::cpu
