#include "match.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace fa_onnx {

namespace {

constexpr int64_t kMaxHeadDim = 256;  // FA_MAX_HEAD_DIM of the C ABI

std::string fmt(double x) {
  std::ostringstream s;
  s.precision(9);
  s << x;
  return s.str();
}

bool is_default(const onnx::NodeProto& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

std::string describe(const Graph& g, const std::string& t) {
  const auto* p = g.producer(t);
  if (p) return "'" + t + "' (from " + p->op_type() + ")";
  if (g.initializer(t)) return "initializer '" + t + "'";
  return "graph input '" + t + "'";
}

// Values at or below this are "masked": exp() of them is 0 next to any finite score. Finite
// fills as transformers writes them (finfo.min) qualify; a row must keep one key (checked).
double masked_threshold(int32_t scores_type) {
  return scores_type == kFloat16 ? -32752.0 : -1.0e38;
}

struct MaskUse {
  Band band;
  bool additive = false;  // Add(scores, band) ; else Where(band, scores, fill) style
  bool keep_true = true;  // Where: scores kept where the condition is true
  double fill = 0;        // Where's other operand
  std::string tensor;
};

struct Step {
  enum Kind { Scale, Tanh, Mask } kind;
  double c = 1;
  MaskUse mask;
};

// The keys a mask keeps, as a band of j - i + shift; refuses what the kernel cannot express.
struct Window {
  int64_t lo = -Band::kUnbounded, hi = Band::kUnbounded;
};

void apply_mask(const MaskUse& m, const Dims& scores, int32_t scores_type, Window& w) {
  const Band& b = m.band;
  const double thr = masked_threshold(scores_type);
  auto masked = [thr](double x) { return x <= thr; };
  bool keep_in, keep_out;
  if (m.additive) {
    keep_in = b.in == 0;
    keep_out = b.out == 0;
    if ((!keep_in && !masked(b.in)) || (!keep_out && !masked(b.out))) {
      if (b.uniform() && std::isfinite(b.in)) return;  // a constant shift: softmax ignores it
      throw Refusal("mask " + m.tensor + " adds values other than 0 and -inf (" + fmt(b.in) + ", " +
                    fmt(b.out) + "): a bias the kernel cannot express");
    }
  } else {
    if (!masked(m.fill))
      throw Refusal("Where fills masked scores with " + fmt(m.fill) + ", not -inf (or a large negative)");
    keep_in = (b.in != 0) == m.keep_true;
    keep_out = (b.out != 0) == m.keep_true;
  }
  if (b.uniform() || (keep_in && keep_out)) {
    if (keep_in) return;
    throw Refusal("mask " + m.tensor + " masks every key");
  }
  if (keep_in && keep_out) return;
  // Keeping the outside of a one-sided band keeps a one-sided band: triu(-inf, 1) keeps j - i <= 0.
  Band kept = b;
  if (!keep_in) {
    if (b.hi == Band::kUnbounded && b.lo != -Band::kUnbounded) {
      kept.hi = b.lo - 1;
      kept.lo = -Band::kUnbounded;
    } else if (b.lo == -Band::kUnbounded && b.hi != Band::kUnbounded) {
      kept.lo = b.hi + 1;
      kept.hi = Band::kUnbounded;
    } else {
      throw Refusal("mask " + m.tensor + " keeps the keys outside a two-sided band");
    }
  }
  // Shape: the band's rows and cols are the scores' (no broadcasting of a band), leading dims 1.
  const size_t r = b.dims.size();
  if (r < 2 || b.dims[r - 2] != scores[2] || b.dims[r - 1] != scores[3])
    throw Refusal("mask " + m.tensor + " has shape " + dims_str(b.dims) + ", not (.., " +
                  scores[2].str() + ", " + scores[3].str() + ")");
  for (size_t k = 0; k + 2 < r; ++k)
    if (b.dims[k].const_value() != 1)
      throw Refusal("mask " + m.tensor + " differs across batch or heads");
  // Alignment: the kernel places query i at key i + seqlen_k - seqlen_q.
  const Expr want = scores[2] - scores[3];
  if (b.shift != want)
    throw Refusal("mask " + m.tensor + " is aligned with offset " + b.shift.str() +
                  " while the kernel aligns bottom-right (offset " + want.str() +
                  "); they agree only when seqlen_q == seqlen_k, which the graph does not imply");
  if (kept.lo != -Band::kUnbounded) w.lo = std::max(w.lo, kept.lo);
  if (kept.hi != Band::kUnbounded) w.hi = std::min(w.hi, kept.hi);
}

void finish_window(const Window& w, const Dims& scores, Outcome& o) {
  const bool bounded = w.lo != -Band::kUnbounded || w.hi != Band::kUnbounded;
  if (!bounded) return;
  if (w.lo > 0 || w.hi < 0)
    throw Refusal("the mask hides the diagonal (keys j - i in [" + std::to_string(w.lo) + ", " +
                  std::to_string(w.hi) + "])");
  // Every row keeps its diagonal key when seqlen_k >= seqlen_q; otherwise early rows see no key,
  // where softmax gives NaN (or a uniform average) and the kernel 0.
  if (!(scores[3] - scores[2]).known_nonnegative())
    throw Refusal("seqlen_q (" + scores[2].str() + ") may exceed seqlen_k (" + scores[3].str() +
                  "): rows without keys would differ");
  o.causal = w.hi == 0;
  o.window_left = w.lo == -Band::kUnbounded ? -1 : -w.lo;
  o.window_right = (w.hi == Band::kUnbounded || w.hi == 0) ? -1 : w.hi;
}

bool single_use(const Graph& g, const std::string& t) {
  return g.consumers(t).size() == 1 && !g.is_graph_output(t);
}

// Picks sources for q, k, v and the sink; fills the plan's wiring and the outcome's sizes.
void choose_wiring(const Graph& g, Analysis& a, Plan& p, const std::vector<Source>& qs,
                   const std::vector<Source>& ks, const std::vector<Source>& vs,
                   const std::string& out, bool grouped) {
  if (qs.empty()) throw Refusal("Q is not a (batch, heads, seq, head_dim) view of a 4-D tensor");
  if (ks.empty()) throw Refusal("K is not a 4-D view (or its heads are repeated as Tile does: h % heads_kv)");
  if (vs.empty()) throw Refusal("V is not a 4-D view (or its heads are repeated as Tile does: h % heads_kv)");
  auto out_type = a.dtype(out);
  if (!out_type) throw Refusal("unknown output type");
  const auto sinks = trace_output(g, a, out);
  int best = std::numeric_limits<int>::max();
  std::string why = "Q, K and V have no common layout and type";
  for (const auto& q : qs)
    for (const auto& k : ks)
      for (const auto& v : vs) {
        if (q.layout != k.layout || q.layout != v.layout || q.dtype != k.dtype || q.dtype != v.dtype)
          continue;
        // kv heads as the MatMul sees them: the source's, times the repeats on the way. They
        // must equal Q's, or be 1 (MatMul broadcasts), or (ONNX Attention's own GQA) divide them.
        const Expr kv_seen = k.heads * Expr::constant(k.rep);
        auto qh = q.heads.const_value(), kh = kv_seen.const_value();
        const bool heads_ok = q.heads == kv_seen || kh == 1 ||
                              (grouped && qh && kh && *kh > 0 && *qh % *kh == 0);
        if (k.heads != v.heads || k.rep != v.rep || !heads_ok) {
          why = "heads of Q " + q.heads.str() + ", K " + k.heads.str() + " x" + std::to_string(k.rep) +
                ", V " + v.heads.str() + " x" + std::to_string(v.rep) + " do not match";
          continue;
        }
        if (q.batch != k.batch || q.batch != v.batch || k.seq != v.seq) {
          why = "batch / sequence sizes of Q, K, V differ";
          continue;
        }
        if (q.head_dim != k.head_dim || q.head_dim != v.head_dim) {
          why = "head_dim of Q, K, V differ (" + q.head_dim.str() + ", " + k.head_dim.str() + ", " +
                v.head_dim.str() + ")";
          continue;
        }
        // The sink: a downstream tensor in the node's layout and type, or the output itself.
        for (int pass = 0; pass < 2; ++pass) {
          const Sink* chosen = nullptr;
          Sink fallback{out, "bhsd", *out_type, 0};
          if (pass == 0) {
            for (const auto& s : sinks)
              if (s.layout == q.layout && s.dtype == q.dtype && (!chosen || s.distance > chosen->distance))
                chosen = &s;
          } else if (q.dtype == *out_type) {
            chosen = &fallback;  // output in place, through a Transpose when bshd
          } else {
            // The node would compute in a narrower type than the graph's output: keep the Casts.
            continue;
          }
          if (!chosen) continue;
          const bool transpose = chosen->layout != q.layout;
          const int cost = (transpose ? 100 : 0) - chosen->distance * 2 -
                           (q.distance + k.distance + v.distance) + (q.layout == "bshd" ? 0 : 1);
          if (cost >= best) continue;
          best = cost;
          p.q = q;
          p.k = k;
          p.v = v;
          p.layout = q.layout;
          p.dtype = q.dtype;
          p.sink = chosen->tensor;
          p.sink_transpose = transpose;
          p.sink_dtype = chosen->dtype;
          p.sink_producer = g.producer_index(chosen->tensor);
        }
      }
  if (best == std::numeric_limits<int>::max()) throw Refusal(why);
  auto hd = p.q.head_dim.const_value();
  if (!hd || *hd < 1 || *hd > kMaxHeadDim)
    throw Refusal("head_dim " + p.q.head_dim.str() + " is not a constant in [1, 256]");
  auto hq = p.q.heads.const_value(), hk = p.k.heads.const_value();
  if (!hq || !hk) throw Refusal("head counts are not constants");
  p.outcome.head_dim = *hd;
  p.outcome.num_heads = *hq;
  p.outcome.num_kv_heads = *hk;
  p.outcome.layout = p.layout;
  p.outcome.dtype = type_name(p.dtype);
  if (p.dtype != kFloat && p.dtype != kFloat16 && p.dtype != kBfloat16)
    throw Refusal(std::string("inputs are ") + type_name(p.dtype) + ", not fp32 / fp16 / bf16");
}

}  // namespace

Plan match_softmax(const Graph& g, Analysis& a, int node) {
  const auto& sm = g.node(node);
  Plan p;
  p.outcome.pattern = "matmul-softmax-matmul";
  const std::string& x = sm.input(0);
  auto xs = a.shape(x);
  if (!xs) throw Refusal("the scores' shape is unknown");
  const int64_t rank = int64_t(xs->size());
  int64_t axis = attr_int(sm, "axis", g.opset() >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (axis != rank - 1)
    throw Refusal("softmax over axis " + std::to_string(axis) + " of a rank-" + std::to_string(rank) +
                  " tensor, not the last");
  // Up from the Softmax to Q·Kᵀ.
  std::vector<Step> steps;
  std::string t = x;
  const onnx::NodeProto* qk = nullptr;
  for (int guard = 0; guard < 32 && !qk; ++guard) {
    const auto* n = g.producer(t);
    if (!n) throw Refusal("the scores are " + describe(g, t) + ", not a MatMul");
    if (!single_use(g, t)) throw Refusal("scores " + describe(g, t) + " are also used elsewhere");
    if (!is_default(*n)) throw Refusal(n->op_type() + " (domain " + n->domain() + ") before Softmax");
    const std::string& op = n->op_type();
    if (op == "MatMul") {
      qk = n;
    } else if (op == "Cast" || op == "Identity") {
      auto to = a.dtype(n->output(0));
      if (!to || !is_float_type(*to)) throw Refusal("scores cast to a non-float type");
      t = n->input(0);
    } else if (op == "Mul" || op == "Div") {
      auto c1 = a.scalar(n->input(1));
      if (c1) {
        steps.push_back({Step::Scale, op == "Mul" ? *c1 : 1.0 / *c1, {}});
        t = n->input(0);
      } else if (op == "Mul" && a.scalar(n->input(0))) {
        steps.push_back({Step::Scale, *a.scalar(n->input(0)), {}});
        t = n->input(1);
      } else {
        throw Refusal("scores " + std::string(op == "Mul" ? "multiplied" : "divided") + " by " +
                      describe(g, op == "Mul" ? n->input(1) : n->input(1)) +
                      ", not a scalar (a per-head or per-position scale)");
      }
    } else if (op == "Add") {
      MaskUse m;
      m.additive = true;
      if (auto b = a.band(n->input(1))) {
        m.band = *b;
        m.tensor = describe(g, n->input(1));
        t = n->input(0);
      } else if (auto b0 = a.band(n->input(0))) {
        m.band = *b0;
        m.tensor = describe(g, n->input(0));
        t = n->input(1);
      } else {
        throw Refusal("scores plus " + describe(g, n->input(1)) +
                      ": an additive mask or bias (padding, ALiBi, arbitrary) that is not a causal or "
                      "sliding-window band");
      }
      steps.push_back({Step::Mask, 1, m});
    } else if (op == "Where") {
      MaskUse m;
      auto fill_b = a.scalar(n->input(2)), fill_a = a.scalar(n->input(1));
      if (fill_b) {
        m.keep_true = true;
        m.fill = *fill_b;
        t = n->input(1);
      } else if (fill_a) {
        m.keep_true = false;
        m.fill = *fill_a;
        t = n->input(2);
      } else {
        throw Refusal("Where between two tensors, not a mask fill");
      }
      auto b = a.band(n->input(0));
      if (!b)
        throw Refusal("Where's condition " + describe(g, n->input(0)) +
                      " is not a causal or sliding-window band (an arbitrary mask)");
      m.band = *b;
      m.tensor = describe(g, n->input(0));
      steps.push_back({Step::Mask, 1, m});
    } else if (op == "Tanh") {
      steps.push_back({Step::Tanh, 1, {}});
      t = n->input(0);
    } else {
      throw Refusal(op + " between Q·Kᵀ and Softmax");
    }
  }
  if (!qk) throw Refusal("no MatMul within 32 ops above the Softmax");
  auto scores = a.shape(qk->output(0));
  auto scores_type = a.dtype(qk->output(0));
  if (!scores || scores->size() != 4 || !scores_type)
    throw Refusal("Q·Kᵀ is not 4-D (batch, heads, seqlen_q, seqlen_k)");
  // Interpret the steps from the MatMul down.
  double pre = 1, post = 1;
  bool tanh = false;
  Window w;
  bool masked = false;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->kind == Step::Scale) {
      if (masked && !(it->c > 0))
        throw Refusal("scores scaled by " + fmt(it->c) + " after the mask");
      (tanh ? post : pre) *= it->c;
    } else if (it->kind == Step::Tanh) {
      if (tanh) throw Refusal("two Tanh between Q·Kᵀ and Softmax");
      if (masked) throw Refusal("softcap (Tanh) applied after the mask");
      tanh = true;
    } else {
      apply_mask(it->mask, *scores, *scores_type, w);
      masked = true;
    }
  }
  finish_window(w, *scores, p.outcome);
  if (tanh && !(post > 0)) throw Refusal("Tanh scaled by " + fmt(post) + ": not a softcap");
  p.outcome.softcap = tanh ? post : 0;
  double scale = tanh ? pre * post : pre;
  // Down from the Softmax to P·V.
  t = sm.output(0);
  const onnx::NodeProto* pv = nullptr;
  for (int guard = 0; guard < 8 && !pv; ++guard) {
    if (!single_use(g, t)) throw Refusal("the attention probabilities are also used elsewhere (an output?)");
    const auto& n = g.node(g.consumers(t)[0]);
    const std::string& op = n.op_type();
    if (!is_default(n)) throw Refusal(op + " after Softmax");
    if (op == "MatMul") {
      if (n.input(0) != t) throw Refusal("the probabilities are the right operand of the MatMul");
      pv = &n;
    } else if (op == "Cast" || op == "Identity") {
      t = n.output(0);
    } else if (op == "Dropout") {
      if (n.input_size() > 2 && !n.input(2).empty()) {
        auto tm = a.scalar(n.input(2));
        if (!tm || *tm != 0) throw Refusal("Dropout in training mode");
      }
      if (n.output_size() > 1 && !n.output(1).empty() && !g.consumers(n.output(1)).empty())
        throw Refusal("Dropout's mask is used");
      t = n.output(0);
    } else {
      throw Refusal(op + " between Softmax and the MatMul with V");
    }
  }
  if (!pv) throw Refusal("no MatMul with V after the Softmax");
  auto qs = trace_operand(g, a, qk->input(0), Operand::Q);
  auto ks = trace_operand(g, a, qk->input(1), Operand::KT);
  auto vs = trace_operand(g, a, pv->input(1), Operand::V);
  choose_wiring(g, a, p, qs, ks, vs, pv->output(0), false);
  scale *= p.q.scale * p.k.scale;
  if (!(scale > 0) || !std::isfinite(scale)) throw Refusal("softmax scale " + fmt(scale) + " is not positive");
  p.outcome.scale = scale;
  if (p.q.seq != (*scores)[2] || p.k.seq != (*scores)[3])
    throw Refusal("sequence sizes of Q / K do not match the scores");
  return p;
}

Plan match_attention_node(const Graph& g, Analysis& a, int node) {
  const auto& n = g.node(node);
  Plan p;
  p.outcome.pattern = "Attention";
  for (int k = 4; k < n.input_size(); ++k)
    if (!n.input(k).empty())
      throw Refusal(k == 6 ? "nonpad_kv_seqlen input (padding per batch entry)"
                           : "past_key / past_value inputs (a KV cache)");
  for (int k = 1; k < n.output_size(); ++k)
    if (!n.output(k).empty() && (!g.consumers(n.output(k)).empty() || g.is_graph_output(n.output(k))))
      throw Refusal("output " + std::to_string(k) + " (present_key / present_value / qk_matmul_output) is used");
  auto qsh = a.shape(n.input(0));
  if (!qsh || qsh->size() != 4) throw Refusal("3-D (or unknown-rank) Q, K, V: only 4-D inputs are fused");
  auto ksh = a.shape(n.input(1));
  if (!ksh || ksh->size() != 4) throw Refusal("K is not 4-D");
  Dims scores{(*qsh)[0], (*qsh)[1], (*qsh)[2], (*ksh)[2]};
  auto qt = a.dtype(n.input(0));
  if (!qt) throw Refusal("unknown input type");
  Window w;
  if (n.input_size() > 3 && !n.input(3).empty()) {
    MaskUse m;
    auto mt = a.dtype(n.input(3));
    auto b = a.band(n.input(3));
    if (!b || !mt)
      throw Refusal("attn_mask " + describe(g, n.input(3)) + " is not a causal or sliding-window band");
    m.band = *b;
    m.tensor = describe(g, n.input(3));
    m.additive = *mt != kBool;
    m.keep_true = true;
    m.fill = -INFINITY;
    apply_mask(m, scores, *qt, w);
  }
  if (attr_int(n, "is_causal", 0) != 0) {
    // ONNX's is_causal without a cache is upper-left aligned: j <= i.
    if (scores[2] != scores[3])
      throw Refusal("is_causal is upper-left aligned and seqlen_q (" + scores[2].str() +
                    ") may differ from seqlen_k (" + scores[3].str() + ")");
    w.hi = std::min<int64_t>(w.hi, 0);
  }
  finish_window(w, scores, p.outcome);
  const float softcap = attr_float(n, "softcap", 0.f);
  if (softcap < 0) throw Refusal("negative softcap");
  p.outcome.softcap = softcap;
  auto qs = trace_operand(g, a, n.input(0), Operand::Q);
  auto ks = trace_operand(g, a, n.input(1), Operand::K);
  auto vs = trace_operand(g, a, n.input(2), Operand::V);
  choose_wiring(g, a, p, qs, ks, vs, n.output(0), true);
  // scale: the attribute, or 1/sqrt(head_dim) of the original Q (p.q's head_dim).
  double scale = find_attr(n, "scale") ? attr_float(n, "scale", 0.f)
                                       : 1.0 / std::sqrt(double(p.outcome.head_dim));
  scale *= p.q.scale * p.k.scale;
  if (!(scale > 0) || !std::isfinite(scale)) throw Refusal("scale " + fmt(scale) + " is not positive");
  p.outcome.scale = scale;
  return p;
}

}  // namespace fa_onnx
