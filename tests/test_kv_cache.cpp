// The KV cache's bookkeeping (models/llama/kv_cache.h): the checks that keep one prefill from
// writing a prompt over another. Its attention through the model is in test_llama.cpp.
#include <catch2/catch.hpp>

#include <vector>

#include "models/llama/kv_cache.h"

using namespace tandem;

TEST_CASE("a prefill that names a cache slot twice is refused: the second sequence would overwrite the first",
          "[llama][kv_cache]") {
  models::KvCache cache(1, 3, 8, 2, 4, torch::TensorOptions().dtype(torch::kFloat32), 2, 8);
  const std::vector<models::AttentionSegment> two{{0, 3, 0, 0}, {3, 2, 3, 0}};
  CHECK_NOTHROW(cache.check_prefill(two, {0, 1}));
  CHECK_THROWS_WITH(cache.check_prefill(two, {1, 1}), Catch::Contains("prefill slot 1 is named twice"));
  CHECK_NOTHROW(cache.check_prefix_prefill(two, {0, 1}));
  CHECK_THROWS_WITH(cache.check_prefix_prefill(two, {0, 0}), Catch::Contains("prefix slot 0 is named twice"));
}

TEST_CASE("prefix slots are freed with their last reader; move carries the reader and the rows", "[llama][kv_cache]") {
  // 1 layer, 3 slots of 8, 2 kv heads of dim 4, 2 prefix slots of 8.
  models::KvCache cache(1, 3, 8, 2, 4, torch::TensorOptions().dtype(torch::kFloat64), 2, 8);
  CHECK(cache.free_prefixes(2) == std::vector<int64_t>{0, 1});
  cache.set_prefix_length(1, 5);
  cache.attach(0, 1);
  cache.attach(2, 1);
  CHECK(cache.free_prefixes(1) == std::vector<int64_t>{0});
  CHECK_THROWS_WITH(cache.free_prefixes(2), Catch::Contains("2 prefix slots wanted, 1 free of 2"));
  CHECK_THROWS_WITH(cache.attach(1, 0), Catch::Contains("cannot read prefix slot 0"));  // prefix 0 is empty

  cache.set_length(0, 2);
  cache.set_length(2, 3);
  CHECK(cache.position(0) == 7);
  CHECK(cache.position(2) == 8);
  CHECK(torch::equal(cache.decode_positions(1, torch::kCPU), torch::tensor({7}, torch::kInt64)));
  CHECK_THROWS_WITH(cache.decode_positions(2, torch::kCPU),  // slot 1 is empty: nothing to decode from
                    Catch::Contains("length 0 (capacity 8, position 0)"));

  // Rows 0, 1 and 2 of slot 0 written by store_decode; the move copies the slot's 2 rows, not the third.
  const torch::Tensor k = torch::arange(8, torch::kFloat64).view({1, 2, 4}) + 1;  // (1, H_kv, D)
  for (int64_t row = 0; row < 3; ++row)
    models::store_decode(cache.layer(0), k * (row + 1), -k * (row + 1), torch::tensor({row}, torch::kInt64));
  cache.move(0, 1);  // slot 0 (2 rows, prefix 1) becomes slot 1
  CHECK(cache.prefix_of(1) == 1);
  CHECK(cache.prefix_of(0) == -1);
  CHECK(cache.length(0) == 0);
  CHECK(cache.length(1) == 2);
  const models::LayerKv& kv = cache.layer(0);
  CHECK(torch::equal(kv.k[1].narrow(1, 0, 2), torch::stack({k[0], 2 * k[0]}, 1)));  // (H_kv, 2, D)
  CHECK(torch::equal(kv.v[1].narrow(1, 0, 2), torch::stack({-k[0], -2 * k[0]}, 1)));
  CHECK(kv.k[1].narrow(1, 2, 6).abs().sum().item<double>() == 0);

  cache.clear(1);
  CHECK(cache.free_prefixes(1) == std::vector<int64_t>{0});  // slot 2 still reads prefix 1
  cache.clear(2);
  CHECK(cache.free_prefixes(2) == std::vector<int64_t>{0, 1});
}
