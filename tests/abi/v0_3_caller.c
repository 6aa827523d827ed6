/* A program built against the 0.3 header (flashattn_v0_3.h, a verbatim copy of
 * include/flashattn/flashattn.h at 0.3): its fa_params is 1864 bytes and its fa_params_init is
 * the symbol fa_params_init_v3. */
#include "flashattn_v0_3.h"
#include "problem.h"

#define ABI_RUN abi_run_v0_3
#include "caller_body.h"
