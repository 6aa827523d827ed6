/* The same program built against the current header. */
#include "flashattn/flashattn.h"
#include "problem.h"

#define ABI_RUN abi_run_current
#include "caller_body.h"
