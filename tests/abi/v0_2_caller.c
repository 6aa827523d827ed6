/* A program built against the 0.2 header (flashattn_v0_2.h, a verbatim copy of
 * include/flashattn/flashattn.h at 0.2): its fa_params is 1328 bytes and its fa_params_init is
 * the symbol fa_params_init_v2. */
#include "flashattn_v0_2.h"
#include "problem.h"

#define ABI_RUN abi_run_v0_2
#include "caller_body.h"
