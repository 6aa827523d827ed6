/* What a C caller may pass but C++ cannot express without undefined behaviour: any int as an
 * fa_status (a C enum converts from every int; a C++ enum only holds its enumerators' range). */
#include "flashattn/flashattn.h"

const char* fa_fuzz_status_string(int status) { return fa_status_string((fa_status)status); }
