#include <gtest/gtest.h>

#include "support.h"

namespace fa::test {
TEST(Smoke, FlashMatchesReference) {
  Case c;
  c.batch = 2; c.heads_q = 4; c.heads_kv = 2; c.seqlen_q = 129; c.seqlen_k = 77; c.head_dim = 40;
  c.causal = true; c.softcap = 5.f; c.alibi = true; c.dropout_p = 0.17f;
  Problem pr(c);
  run_forward(pr, FA_BACKEND_FLASH);
  run_backward(pr, FA_BACKEND_FLASH);
  const Dense got = outputs(pr, true);
  const Dense ref = reference(pr, false, true);
  const Dense naive = reference(pr, true, true);
  printf("out %g (naive %g) lse %g (naive %g) dq %g (%g) dk %g (%g) dv %g (%g)\n",
    max_abs_diff(got.out, ref.out), max_abs_diff(naive.out, ref.out),
    max_abs_diff(got.lse, ref.lse), max_abs_diff(naive.lse, ref.lse),
    max_abs_diff(got.dq, ref.dq), max_abs_diff(naive.dq, ref.dq),
    max_abs_diff(got.dk, ref.dk), max_abs_diff(naive.dk, ref.dk),
    max_abs_diff(got.dv, ref.dv), max_abs_diff(naive.dv, ref.dv));
}
}  // namespace fa::test
