/* A program built against the 0.1 header (flashattn_v0_1.h, a verbatim copy of
 * include/flashattn/flashattn.h at 0.1): its fa_params is 1144 bytes and it calls the symbol
 * fa_params_init. */
#include "flashattn_v0_1.h"
#include "problem.h"

#define ABI_RUN abi_run_v0_1
#include "caller_body.h"
