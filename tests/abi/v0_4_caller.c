/* A program built against the 0.4 header (flashattn_v0_4.h, a verbatim copy of
 * include/flashattn/flashattn.h at 0.4): its fa_params is 2040 bytes and its fa_params_init is
 * the symbol fa_params_init_v4. */
#include "flashattn_v0_4.h"
#include "problem.h"

#define ABI_RUN abi_run_v0_4
#include "caller_body.h"
