// The model as the passes see it: the main graph's nodes with their producers and consumers,
// initializers and Constant nodes readable as numbers, attributes by name. Built on the ONNX
// protobuf classes of Debian's libonnx (onnx-ml.proto); fields this schema predates (newer IR
// versions) are kept as protobuf unknown fields and written back unchanged.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace fa_onnx {

// ONNX TensorProto.DataType values used here.
enum ElemType : int32_t {
  kFloat = 1, kUint8 = 2, kInt8 = 3, kInt32 = 6, kInt64 = 7, kBool = 9, kFloat16 = 10,
  kDouble = 11, kBfloat16 = 16
};
bool is_float_type(int32_t t);
const char* type_name(int32_t t);

// A constant tensor's contents as doubles (ints and bools included), with its shape.
struct ConstTensor {
  int32_t type = 0;
  std::vector<int64_t> dims;
  std::vector<double> values;
};
// Decodes raw_data or the typed fields; nullopt for external data or an unsupported type.
std::optional<ConstTensor> decode_tensor(const onnx::TensorProto& t, size_t max_elems);
// The tensor's element bytes (raw_data or typed fields re-encoded), for copying weights.
std::optional<std::string> tensor_bytes(const onnx::TensorProto& t);

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name);
int64_t attr_int(const onnx::NodeProto& n, const std::string& name, int64_t dflt);
float attr_float(const onnx::NodeProto& n, const std::string& name, float dflt);
std::string attr_string(const onnx::NodeProto& n, const std::string& name, const std::string& dflt);
std::optional<std::vector<int64_t>> attr_ints(const onnx::NodeProto& n, const std::string& name);

// A node's inputs, including the outer-scope tensors its subgraphs (If / Loop / Scan bodies) read.
std::vector<std::string> node_inputs(const onnx::NodeProto& n);

class Graph {
 public:
  explicit Graph(onnx::ModelProto& model);
  onnx::ModelProto& model() { return model_; }
  onnx::GraphProto& proto() { return *model_.mutable_graph(); }
  const onnx::GraphProto& proto() const { return model_.graph(); }
  int64_t opset() const { return opset_; }  // of the default domain

  // Index over the current nodes; call reindex() after editing the node list.
  void reindex();
  const onnx::NodeProto* producer(const std::string& tensor) const;
  int producer_index(const std::string& tensor) const;  // -1 when not produced by a node
  const std::vector<int>& consumers(const std::string& tensor) const;
  const onnx::NodeProto& node(int i) const { return model_.graph().node(i); }
  int node_count() const { return model_.graph().node_size(); }
  bool is_graph_output(const std::string& tensor) const { return outputs_.count(tensor) > 0; }
  const onnx::TensorProto* initializer(const std::string& name) const;
  // A Constant node's or an initializer's value (the tensor proto), if the tensor is one.
  const onnx::TensorProto* constant_proto(const std::string& name) const;
  // Declared element type and dims of a graph input / output / value_info entry.
  const onnx::TypeProto_Tensor* declared_type(const std::string& name) const;

  std::string fresh_name(const std::string& base);

 private:
  onnx::ModelProto& model_;
  int64_t opset_ = 0;
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> consumers_;
  std::map<std::string, const onnx::TensorProto*> inits_;
  std::map<std::string, const onnx::TypeProto_Tensor*> declared_;
  std::set<std::string> outputs_, names_;
  int counter_ = 0;
};

}  // namespace fa_onnx
