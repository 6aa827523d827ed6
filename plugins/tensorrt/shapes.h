// From TensorRT's tensors to the library's call: the problem sizes a node's inputs give in its
// layout, the checks that do not need the library (ranks, sizes that must agree across q, k, v
// and the fields), the output's dims, and the fa_params whose views read the inputs in place.
// TensorRT's linear format is the dense row-major array of the dims, so every view's strides
// follow from the dims: bhsd is read as a (b, s, h, d) view with permuted strides, packed_qkv as
// three strided views of one buffer (no copy, as the ONNX Runtime op does).
#pragma once

#include <cstdint>
#include <string>

#include <NvInferRuntime.h>

#include "fields.h"
#include "flashattn/flashattn.h"

namespace fa_trt {

// One call's sizes; -1 where a dim is not known yet (a build-time wildcard).
struct Sizes {
  int64_t batch = -1, seqlen_q = -1, seqlen_k = -1, heads_q = -1, heads_kv = -1, head_dim = -1;
  // The packed input's last dim (packed_qkv only), else -1.
  int64_t packed_features = -1;
};

// The sizes of in[0 .. nb_inputs) in c's layout, after checking the input count, the ranks and
// every relation that the known dims allow: k and v alike, q / k batch and head_dim, heads_kv
// dividing heads_q, heads equal to the fields' when given, packed features divisible by
// num_heads + 2 num_kv_heads, head_dim in [1, FA_MAX_HEAD_DIM], element counts that fit in
// int64. Dims below 0 count as unknown. On failure returns false with *error naming the input,
// the dim and what was expected.
bool read_sizes(const Config& c, const nvinfer1::Dims* in, int32_t nb_inputs, Sizes* out, std::string* error);

// "layout bshd takes 3 inputs (q, k, v); the node has 2".
std::string input_count_error(const Config& c, int32_t nb_inputs);

// The output's dims for fully known sizes: q's shape in its layout; (b, s, num_heads, head_dim)
// for packed_qkv.
nvinfer1::Dims output_dims(const Config& c, const Sizes& s);

// The forward call over the buffers: inputs[0 .. nb_inputs) and output, in memory of dev, of
// element type dt (FA_DTYPE_FP16 / FA_DTYPE_BF16). No LSE is requested (the library's forward
// then computes none). s must be fully known.
fa_params make_params(const Config& c, const Sizes& s, fa_dtype dt, const void* const* inputs, void* output,
                      fa_device dev);

}  // namespace fa_trt
