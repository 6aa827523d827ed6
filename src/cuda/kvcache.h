// The KV-cache forward family (src/cuda/kernels/kvcache/, issue 26) as the CUDA backend sees it.
// Its registry row (api/dispatch.cpp, "cuda-kvcache") comes first and is in play for forwards
// that use a KV cache's fields (a cache, its lengths, row map or left padding, appended keys,
// rotary) or ask for split-KV (num_splits > 1); the other CUDA families refuse those fields.
// Tuning::kvcache_all puts every forward it can serve in its way (the GPU tests' hook).
#pragma once

#include <cstddef>
#include <string>

#include "core/params.h"
#include "core/tuning.h"

namespace fa::cuda {

// "" when the family can run this forward on ctx's device, else why not.
std::string kvcache_refusal(const Params& p, const Context& ctx);
// The rotated q and the split partials (kernels/kvcache/plan.h, workspace_layout).
size_t kvcache_workspace(const Params& p, const Context& ctx);
void kvcache_forward(const Params& p, const Context& ctx, void* workspace, size_t bytes,
                     void* stream);

namespace kvcache {
struct Plan;
struct WorkspaceLayout;
// The call's plan (kernels/kvcache/plan.h) and workspace layout, the same for the query and the
// launch.
Plan plan_of(const Params& p, const Context& ctx);
WorkspaceLayout layout_of(const Params& p, const Plan& plan);
// Per input type (kvcache_bf16.cu, kvcache_fp16.cu, kvcache_fp8.cu): the launches of one call.
// Tag: the products' 16-bit type (fp16 for fp8 inputs, converted on load); kFp8: q, k, v are
// e4m3; OutTag: out's type.
template <typename Tag, bool kFp8, typename OutTag>
void run(const Params& p, const Context& ctx, void* workspace, size_t bytes, void* stream);
}  // namespace kvcache

}  // namespace fa::cuda
