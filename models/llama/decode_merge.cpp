// See decode_merge.h. Plain loops over strided host tensors: n x H_kv x G rows of D numbers.
#include "models/llama/decode_merge.h"

#include <ATen/Dispatch.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace tandem::models {

namespace {

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("decode_merge: ") + what);
}

// ATen's logaddexp: equal infinities stay themselves (no inf - inf).
template <class A>
A log_add_exp(A a, A b) {
  if (std::isinf(a) && a == b) return a;
  const A m = std::max(a, b);
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

}  // namespace

torch::Tensor gather_readers(const torch::Tensor& x, const torch::Tensor& gather, int64_t groups, int64_t widest) {
  require(x.dim() == 4 && x.device().is_cpu(), "gather_readers needs host rows (n, H_kv, G, D)");
  require(gather.scalar_type() == torch::kInt64 && gather.is_contiguous() && gather.numel() == groups * widest,
          "gather_readers needs g m_max int64 positions");
  const int64_t n = x.size(0), kv_heads = x.size(1), group = x.size(2), dim = x.size(3);
  const torch::Tensor src = x.contiguous();  // (n, H_kv, G, D)
  const torch::Tensor out =
      torch::empty({groups, kv_heads, widest * group, dim}, x.options());  // (g, H_kv, m_max G, D)
  const int64_t* at = gather.data_ptr<int64_t>();
  const int64_t block = group * dim;  // one kv head's G rows of one sequence
  const size_t bytes = static_cast<size_t>(block) * src.element_size();
  const auto* s = static_cast<const char*>(src.data_ptr());
  auto* o = static_cast<char*>(out.data_ptr());
  for (int64_t j = 0; j < groups; ++j)
    for (int64_t h = 0; h < kv_heads; ++h)
      for (int64_t r = 0; r < widest; ++r) {
        char* dst = o + ((j * kv_heads + h) * widest + r) * static_cast<int64_t>(bytes);
        const int64_t i = at[j * widest + r];
        require(i >= 0 && i <= n, "gather_readers: a position outside [0, n]");
        if (i < n)
          std::memcpy(dst, s + (i * kv_heads + h) * static_cast<int64_t>(bytes), bytes);
        else
          std::memset(dst, 0, bytes);  // 0.0 in every floating dtype
      }
  return out;
}

torch::Tensor merge_by_lse(const torch::Tensor& own, const torch::Tensor& own_lse, const torch::Tensor& pre,
                           const torch::Tensor& pre_lse, const torch::Tensor& place, int64_t widest) {
  require(own.dim() == 4 && pre.dim() == 4 && own_lse.dim() == 3 && pre_lse.dim() == 3, "merge_by_lse: ranks");
  require(own.device().is_cpu() && pre.device().is_cpu() && own_lse.device().is_cpu() && pre_lse.device().is_cpu(),
          "merge_by_lse needs host tensors");
  require(own.scalar_type() == pre.scalar_type() && own_lse.scalar_type() == pre_lse.scalar_type(),
          "merge_by_lse: the two parts' dtypes differ");
  require(place.scalar_type() == torch::kInt64 && place.is_contiguous() && place.numel() == own.size(0),
          "merge_by_lse needs one int64 place per sequence");
  const int64_t n = own.size(0), kv_heads = own.size(1), group = own.size(2), dim = own.size(3);
  const int64_t g = pre.size(0), rows = widest * group;
  require(pre.size(1) == kv_heads && pre.size(2) == rows && pre.size(3) == dim && own_lse.size(0) == n &&
              own_lse.size(1) == kv_heads && own_lse.size(2) == group && pre_lse.size(0) == g &&
              pre_lse.size(1) == kv_heads && pre_lse.size(2) == rows,
          "merge_by_lse: shapes that do not fit");
  const torch::Tensor o = own.contiguous(), p = pre.contiguous();  // (n, H_kv, G, D), (g, H_kv, m_max G, D)
  const torch::Tensor out = torch::empty({n, kv_heads * group, dim}, own.options());  // (n, H, D)
  const int64_t* pos = place.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(own_lse.scalar_type(), "merge_by_lse", [&] {
    using A = scalar_t;  // the log-sum-exps' dtype, the merge's arithmetic
    const torch::Tensor l1s = own_lse.contiguous(), l2s = pre_lse.contiguous();
    const A* l1p = l1s.data_ptr<A>();
    const A* l2p = l2s.data_ptr<A>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, own.scalar_type(), "merge_by_lse_rows", [&] {
      const scalar_t* op = o.data_ptr<scalar_t>();
      const scalar_t* pp = p.data_ptr<scalar_t>();
      scalar_t* dst = out.data_ptr<scalar_t>();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = pos[i];
        require(at >= 0 && at <= g * widest, "merge_by_lse: a place outside [0, g m_max]");
        for (int64_t h = 0; h < kv_heads; ++h)
          for (int64_t t = 0; t < group; ++t) {
            const int64_t row = (i * kv_heads + h) * group + t;  // also the output row: head h G + t
            const scalar_t* a = op + row * dim;
            scalar_t* y = dst + row * dim;
            if (at == g * widest) {  // no prefix: the own part alone
              std::copy(a, a + dim, y);
              continue;
            }
            const int64_t j = at / widest, r = at % widest;
            const int64_t prow = (j * kv_heads + h) * rows + r * group + t;
            const A l1 = l1p[row], l2 = l2p[prow], l = log_add_exp(l1, l2);
            const A wa = std::exp(l1 - l), wb = std::exp(l2 - l);
            const scalar_t* b = pp + prow * dim;
            for (int64_t d = 0; d < dim; ++d) {
              const A first = static_cast<A>(a[d]) * wa;  // two roundings, as the separate ops had
              const A second = static_cast<A>(b[d]) * wb;
              y[d] = static_cast<scalar_t>(first + second);
            }
          }
      }
    });
  });
  return out;
}

}  // namespace tandem::models
