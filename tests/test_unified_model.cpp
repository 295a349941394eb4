// The unified text + image model (models/unified): both heads against the independent Python
// reference (scripts/fixtures/make_unified_fixture.py), the attention mask checked by exact-zero
// gradients, padding invariance, the additivity of the text and image gradients through the shared
// trunk, and the config. Every numeric check has a control showing it can fail.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>

#include "common/error.h"
#include "fixtures.h"
#include "llama_test_util.h"
#include "models/safetensors.h"
#include "models/unified/model.h"
#include "models/unified/sequence.h"
#include "models/unified/weights.h"

using namespace tandem;
using models::UnifiedInput;
using models::UnifiedModel;

namespace {

std::string fixture_dir() { return std::string(TANDEM_FIXTURES_DIR) + "/unified_tiny"; }

const std::map<std::string, torch::Tensor>& cases() {
  static const auto c = models::load_safetensors(fixture_dir() + "/cases.safetensors");
  return c;
}
torch::Tensor fx(const std::string& name) { return cases().at(name); }

UnifiedModel fixture_model(torch::Dtype dtype = torch::kFloat64) { return models::load_unified(fixture_dir(), dtype); }

// Only the real slots of padded (B, T, V) logits, one row after the other: (N_real, V).
torch::Tensor real_rows(const torch::Tensor& logits, const torch::Tensor& lengths) {
  std::vector<torch::Tensor> rows;
  for (int64_t b = 0; b < logits.size(0); ++b) rows.push_back(logits[b].narrow(0, 0, lengths[b].item<int64_t>()));
  return torch::cat(rows, 0);
}

UnifiedInput image_input() {
  return {fx("image.prompt_ids"), fx("image.prompt_lengths"), fx("image.x_t"), fx("image.sigma")};
}

// The mask with one rule changed, for the controls.
torch::Tensor text_sees_image_mask(const torch::Tensor& lengths, int64_t width, int64_t patches) {
  torch::Tensor m = models::unified_attention_mask(lengths, width, patches).clone();  // (B, 1, T, T)
  m.narrow(2, 0, width).narrow(3, width, patches).fill_(true);
  return m;
}
torch::Tensor causal_mask(const torch::Tensor& lengths, int64_t width, int64_t patches) {
  return models::unified_attention_mask(lengths, width, patches) &
         torch::ones({width + patches, width + patches}, torch::kBool).tril();
}

// A forward through embed / trunk / heads that keeps the input embeddings h (to differentiate
// with respect to sequence slots), under `mask` (the real one when undefined).
struct Traced {
  torch::Tensor h;  // (B, T, D) input embeddings, in the graph
  models::UnifiedOutput out;
};
Traced traced_forward(UnifiedModel& model, const UnifiedInput& in, torch::Tensor mask = {}) {
  const int64_t width = in.text_ids.size(1), n = in.has_image() ? model->config().num_patches() : 0;
  Traced t;
  t.h = model->embed(in);
  if (!mask.defined()) mask = models::unified_attention_mask(in.text_lengths, width, n);
  t.out = model->heads(model->trunk(t.h, models::unified_positions(in.text_lengths, width, n), mask), width,
                       in.has_image());
  return t;
}

// d(sum(w * y))/dx for a fixed random w; zeros where x is not reached.
torch::Tensor grad_of(const torch::Tensor& y, const torch::Tensor& x, uint64_t seed = 1) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const torch::Tensor w = torch::randn(y.sizes(), gen, torch::kFloat64).to(y.scalar_type());
  const auto g = torch::autograd::grad({(y * w).sum()}, {x}, {}, true, false, true)[0];
  return g.defined() ? g : torch::zeros_like(x);
}

// Per-slot gradient magnitude: (B, T, D) -> (B, T).
torch::Tensor slot_norms(const torch::Tensor& g) { return g.abs().sum(-1); }

// Next-token cross-entropy over the real slots with a next real token, summed / count.
torch::Tensor text_loss(const torch::Tensor& logits, const torch::Tensor& ids, const torch::Tensor& lengths) {
  torch::Tensor total = torch::zeros({}, logits.options());
  int64_t count = 0;
  for (int64_t b = 0; b < ids.size(0); ++b) {
    const int64_t n = lengths[b].item<int64_t>();
    if (n < 2) continue;
    const torch::Tensor logp = torch::log_softmax(logits[b].narrow(0, 0, n - 1), -1);  // (n-1, V)
    total = total - logp.gather(1, ids[b].narrow(0, 1, n - 1).unsqueeze(1)).sum();
    count += n - 1;
  }
  return total / static_cast<double>(count);
}

std::map<std::string, torch::Tensor> grads_of(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : m.named_parameters())
    g[p.key()] = p.value().grad().defined() ? p.value().grad().detach().clone() : torch::zeros_like(p.value());
  return g;
}

}  // namespace

TEST_CASE("unified: both heads match the independent reference (float64 1e-10, float32 1e-4 of max)", "[unified]") {
  for (const auto [dtype, tol] : {std::pair{torch::kFloat64, 1e-10}, std::pair{torch::kFloat32, 1e-4}}) {
    INFO(c10::toString(dtype));
    UnifiedModel model = fixture_model(dtype);
    torch::NoGradGuard no_grad;
    const torch::Tensor logits = model->text_logits(fx("text.ids"), fx("text.lengths"));  // (B, T, V)
    CHECK(logits.scalar_type() == dtype);
    const double text_err =
        test::rel_to_max(real_rows(logits, fx("text.lengths")), real_rows(fx("text.logits"), fx("text.lengths")));
    const models::UnifiedOutput joint = model->forward(image_input());
    const double vel_err = test::rel_to_max(joint.velocity, fx("image.velocity"));
    const double prompt_err = test::rel_to_max(real_rows(joint.text_logits, fx("image.prompt_lengths")),
                                               real_rows(fx("image.prompt_logits"), fx("image.prompt_lengths")));
    INFO("text " << text_err << ", velocity " << vel_err << ", prompt " << prompt_err);  // shown with -s
    CHECK(text_err < tol);
    CHECK(vel_err < tol);
    CHECK(prompt_err < tol);
    // Bitwise: velocity() runs forward() on the same inputs (same shapes, same kernels).
    CHECK(torch::equal(
        model->velocity(fx("image.prompt_ids"), fx("image.prompt_lengths"), fx("image.x_t"), fx("image.sigma")),
        joint.velocity));
  }
}

TEST_CASE("unified: controls: a perturbed weight or a causal image mask miss the reference", "[unified]") {
  UnifiedModel model = fixture_model();
  torch::NoGradGuard no_grad;
  {
    UnifiedModel perturbed = fixture_model();
    perturbed->named_parameters()["layers.1.mlp.down_proj.weight"][3][5] += 1e-6;
    const torch::Tensor logits = perturbed->text_logits(fx("text.ids"), fx("text.lengths"));
    CHECK(test::rel_to_max(real_rows(logits, fx("text.lengths")), real_rows(fx("text.logits"), fx("text.lengths"))) >
          1e-9);
    CHECK(test::rel_to_max(perturbed->forward(image_input()).velocity, fx("image.velocity")) > 1e-9);
  }
  const UnifiedInput in = image_input();
  const int64_t n = model->config().num_patches();
  const Traced causal = traced_forward(model, in, causal_mask(in.text_lengths, in.text_ids.size(1), n));
  CHECK(test::rel_to_max(causal.out.velocity, fx("image.velocity")) > 1e-3);
}

TEST_CASE("unified: mask and positions are the documented ones", "[unified]") {
  const torch::Tensor lengths = torch::tensor({3, 1, 0}, torch::kInt64);
  const int64_t width = 3, n = 2, t = width + n;
  const torch::Tensor mask = models::unified_attention_mask(lengths, width, n);
  REQUIRE(mask.sizes() == std::vector<int64_t>{3, 1, t, t});
  REQUIRE(mask.scalar_type() == torch::kBool);
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t len = lengths[b].item<int64_t>();
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j) {
        const bool key_real = j >= width || j < len;
        const bool expect = i == j || (key_real && (i < width ? (j < width && j <= i) : true));
        INFO("row " << b << " query " << i << " key " << j);
        CHECK(mask[b][0][i][j].item<bool>() == expect);
      }
  }
  const torch::Tensor pos = models::unified_positions(lengths, width, n);  // (B, T)
  CHECK(torch::equal(pos, torch::tensor({0, 1, 2, 3, 3, 0, 1, 2, 1, 1, 0, 1, 2, 0, 0}, torch::kInt64).view({3, t})));
  CHECK_THROWS_AS(models::unified_attention_mask(torch::tensor({4}, torch::kInt64), width, n), std::invalid_argument);
}

TEST_CASE("unified: patchify is unpatchify's inverse; patch 0 is the top-left block", "[unified]") {
  const torch::Tensor x = torch::arange(2 * 8 * 8, torch::kFloat64).view({1, 2, 8, 8});
  const torch::Tensor tokens = models::patchify(x, 2);  // (1, 16, 8)
  REQUIRE(tokens.sizes() == std::vector<int64_t>{1, 16, 8});
  // Patch 1 is rows 0-1, columns 2-3; values (row, column, channel).
  CHECK(torch::equal(tokens[0][1], torch::stack({x[0][0][0][2], x[0][1][0][2], x[0][0][0][3], x[0][1][0][3],
                                                 x[0][0][1][2], x[0][1][1][2], x[0][0][1][3], x[0][1][1][3]})));
  CHECK(torch::equal(models::unpatchify(tokens, 2, 2), x));
}

TEST_CASE("unified: text logits at t see nothing after t and nothing of the image (exact zeros)", "[unified]") {
  UnifiedModel model = fixture_model();
  const UnifiedInput in = image_input();
  const int64_t width = in.text_ids.size(1), b_rows = in.text_ids.size(0);
  const Traced tr = traced_forward(model, in);
  for (int64_t b = 0; b < b_rows; ++b)
    for (int64_t t = 0; t < in.text_lengths[b].item<int64_t>(); ++t) {
      INFO("row " << b << " text slot " << t);
      const torch::Tensor g = slot_norms(grad_of(tr.out.text_logits[b][t], tr.h));  // (B, T)
      CHECK(g[b].narrow(0, t + 1, g.size(1) - t - 1).max().item<double>() == 0.0);  // later text and every patch
      CHECK(g[b].narrow(0, 0, t + 1).min().item<double>() > 0);                     // every earlier real token
      for (int64_t o = 0; o < b_rows; ++o)
        if (o != b) CHECK(g[o].max().item<double>() == 0.0);  // rows are independent
    }
  // With respect to the latents and the timestep: exactly zero.
  const torch::Tensor x_t = in.x_t.clone().requires_grad_(true), sigma = in.sigma.clone().requires_grad_(true);
  const models::UnifiedOutput out = model->forward({in.text_ids, in.text_lengths, x_t, sigma});
  const torch::Tensor text = real_rows(out.text_logits, in.text_lengths);
  CHECK(grad_of(text, x_t).abs().max().item<double>() == 0.0);
  CHECK(grad_of(text, sigma).abs().max().item<double>() == 0.0);
  // Control: a mask that lets text see the image makes the same gradient nonzero.
  const int64_t n = model->config().num_patches();
  const Traced leaky = traced_forward(model, in, text_sees_image_mask(in.text_lengths, width, n));
  CHECK(slot_norms(grad_of(leaky.out.text_logits[0][0], leaky.h))[0].narrow(0, width, 1).item<double>() > 0);
}

TEST_CASE("unified: velocity depends on every patch and every real prompt token; padding has no influence",
          "[unified]") {
  UnifiedModel model = fixture_model();
  const UnifiedInput in = image_input();  // prompt lengths 3, 1, 0 at width 3
  const int64_t width = in.text_ids.size(1), n = model->config().num_patches(), p = model->config().patch_size;
  const torch::Tensor x_t = in.x_t.clone().requires_grad_(true);
  const Traced tr = traced_forward(model, {in.text_ids, in.text_lengths, x_t, in.sigma});
  const torch::Tensor v_patches = models::patchify(tr.out.velocity, p);  // (B, N, p*p*C)
  for (int64_t b = 0; b < in.text_ids.size(0); ++b) {
    const int64_t len = in.text_lengths[b].item<int64_t>();
    for (const int64_t q : {int64_t{0}, n - 1}) {
      INFO("row " << b << " output patch " << q);
      const torch::Tensor gx = slot_norms(models::patchify(grad_of(v_patches[b][q], x_t), p));  // (B, N)
      CHECK(gx[b].min().item<double>() > 0);                                   // every input patch, before and after q
      const torch::Tensor gh = slot_norms(grad_of(v_patches[b][q], tr.h))[b];  // (T)
      if (len > 0) CHECK(gh.narrow(0, 0, len).min().item<double>() > 0);
      if (len < width) CHECK(gh.narrow(0, len, width - len).max().item<double>() == 0.0);
    }
  }
  // Controls: a causal image mask cuts patch 0 off the last patch; a mask that lets patches see
  // padding gives the padding an influence.
  const Traced causal =
      traced_forward(model, {in.text_ids, in.text_lengths, x_t, in.sigma}, causal_mask(in.text_lengths, width, n));
  const torch::Tensor causal_v = models::patchify(causal.out.velocity, p);  // (B, N, p*p*C)
  const torch::Tensor gc = slot_norms(models::patchify(grad_of(causal_v[0][0], x_t), p));
  CHECK(gc[0][n - 1].item<double>() == 0.0);
  torch::Tensor sees_padding = models::unified_attention_mask(in.text_lengths, width, n).clone();
  sees_padding.narrow(2, width, n).fill_(true);
  const Traced padded = traced_forward(model, in, sees_padding);
  CHECK(slot_norms(grad_of(models::patchify(padded.out.velocity, p)[1][0], padded.h))[1][2].item<double>() > 0);
}

TEST_CASE("unified: a row alone equals the row in a padded batch; padding ids and width change nothing", "[unified]") {
  UnifiedModel model = fixture_model();
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = fx("text.ids"), lengths = fx("text.lengths");
  const torch::Tensor batch = model->text_logits(ids, lengths);  // (B, T, V)
  for (int64_t b = 0; b < ids.size(0); ++b) {
    const int64_t len = lengths[b].item<int64_t>();
    const torch::Tensor alone = model->text_logits(ids[b].narrow(0, 0, len).unsqueeze(0), lengths.narrow(0, b, 1));
    CHECK(test::rel_to_max(batch[b].narrow(0, 0, len), alone[0]) < 1e-12);
  }
  const UnifiedInput in = image_input();
  const torch::Tensor v = model->forward(in).velocity;
  // Other padding ids: bitwise the same on any host, since the shapes are the same (so are the
  // kernels) and masked keys get probability exactly 0 whatever their values.
  torch::Tensor other_ids = in.text_ids.clone();
  other_ids[1].narrow(0, 1, 2).fill_(7);
  other_ids[2].fill_(11);
  CHECK(torch::equal(model->forward({other_ids, in.text_lengths, in.x_t, in.sigma}).velocity, v));
  // Two more padding slots: the same up to float reassociation.
  const torch::Tensor wider = torch::cat({in.text_ids, torch::full({3, 2}, 5, torch::kInt64)}, 1);
  CHECK(test::rel_to_max(model->forward({wider, in.text_lengths, in.x_t, in.sigma}).velocity, v) < 1e-12);
  // Control: a different real prompt token does change the velocity of its row.
  torch::Tensor changed = in.text_ids.clone();
  changed[1][0] = (changed[1][0].item<int64_t>() + 1) % model->config().vocab_size;
  CHECK(test::rel_to_max(model->forward({changed, in.text_lengths, in.x_t, in.sigma}).velocity[1], v[1]) > 1e-6);
}

TEST_CASE("unified: trunk gradient of L_text + L_image is the sum of the separate gradients (float64, 1e-12)",
          "[unified]") {
  UnifiedModel model = fixture_model();
  const torch::Tensor ids = fx("text.ids"), lengths = fx("text.lengths");  // prompts of 6, 4, 1 tokens
  at::Generator gen = at::detail::createCPUGenerator(3);
  const torch::Tensor x0 = torch::randn(fx("image.x_t").sizes(), gen, torch::kFloat64);
  const torch::Tensor noise = torch::randn(x0.sizes(), gen, torch::kFloat64);
  const torch::Tensor sigma = fx("image.sigma").view({-1, 1, 1, 1});
  const torch::Tensor x_t = (1 - sigma) * x0 + sigma * noise, target = noise - x0;  // (B, C, H, W)
  const auto image_loss = [&](const torch::Tensor& v) { return (v - target).pow(2).mean(); };
  const UnifiedInput joint_in{ids, lengths, x_t, fx("image.sigma")};

  // Separate: the text task alone (the prompts as text), then the image task alone.
  model->zero_grad();
  text_loss(model->text_logits(ids, lengths), ids, lengths).backward();
  const auto g_text = grads_of(*model);
  model->zero_grad();
  image_loss(model->velocity(ids, lengths, x_t, fx("image.sigma"))).backward();
  const auto g_image = grads_of(*model);
  // (a) One pass over [prompt, image], one backward of the sum.
  model->zero_grad();
  const models::UnifiedOutput joint = model->forward(joint_in);
  (text_loss(joint.text_logits, ids, lengths) + image_loss(joint.velocity)).backward();
  const auto g_joint = grads_of(*model);
  // (b) The two forwards in one graph, one backward of the sum.
  model->zero_grad();
  (text_loss(model->text_logits(ids, lengths), ids, lengths) +
   image_loss(model->velocity(ids, lengths, x_t, fx("image.sigma"))))
      .backward();
  const auto g_two = grads_of(*model);
  double worst_joint = 0, worst_two = 0;
  for (const auto& [name, g] : g_joint) {
    INFO(name);
    const torch::Tensor sum = g_text.at(name) + g_image.at(name);
    if (name.rfind("layers.", 0) == 0 || name == "norm.weight") REQUIRE(sum.abs().max().item<double>() > 0);
    worst_joint = std::max(worst_joint, test::rel_to_max(g, sum));
    worst_two = std::max(worst_two, test::rel_to_max(g_two.at(name), sum));
  }
  INFO("joint " << worst_joint << ", two forwards " << worst_two);  // shown with -s
  CHECK(worst_joint < 1e-12);
  CHECK(worst_two < 1e-12);
  // Control: if text could see the image, the joint pass would not be the sum of the two tasks.
  model->zero_grad();
  const Traced leaky =
      traced_forward(model, joint_in, text_sees_image_mask(lengths, ids.size(1), model->config().num_patches()));
  const torch::Tensor leaky_loss = text_loss(leaky.out.text_logits, ids, lengths) + image_loss(leaky.out.velocity);
  const auto params = model->named_parameters();
  const std::vector<torch::Tensor> trunk{params["layers.0.self_attn.q_proj.weight"],
                                         params["layers.1.mlp.up_proj.weight"]};
  const auto g_leaky = torch::autograd::grad({leaky_loss}, trunk);
  CHECK(test::rel_to_max(g_leaky[0], g_text.at("layers.0.self_attn.q_proj.weight") +
                                         g_image.at("layers.0.self_attn.q_proj.weight")) > 1e-6);
  CHECK(test::rel_to_max(g_leaky[1],
                         g_text.at("layers.1.mlp.up_proj.weight") + g_image.at("layers.1.mlp.up_proj.weight")) > 1e-6);
}

TEST_CASE("unified: every float dtype runs and every parameter gets a finite, nonzero gradient", "[unified]") {
  for (const torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat64}) {
    INFO(c10::toString(dtype));
    UnifiedModel model(models::unified_config_from_json(models::read_hf_config(fixture_dir())), 5);
    model->to(dtype);
    const models::UnifiedOutput out = model->forward(image_input());
    CHECK(out.velocity.scalar_type() == dtype);
    CHECK(out.text_logits.scalar_type() == (dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32));
    CHECK(out.velocity.sizes() == fx("image.x_t").sizes());
    CHECK(out.text_logits.sizes() == std::vector<int64_t>{3, 3, model->config().vocab_size});
    (out.velocity.to(torch::kFloat32).pow(2).mean() + out.text_logits.logsumexp(-1).mean()).backward();
    for (const auto& item : model->named_parameters()) {
      INFO(item.key());
      REQUIRE(item.value().grad().defined());
      CHECK(torch::isfinite(item.value().grad()).all().item<bool>());
      CHECK(item.value().grad().abs().sum().item<double>() > 0);
    }
  }
}

TEST_CASE("unified: init is a pure function of the seed", "[unified]") {
  const models::UnifiedConfig c = models::unified_config_from_json(models::read_hf_config(fixture_dir()));
  UnifiedModel a(c, 9), b(c, 9), other(c, 10);
  for (const auto& item : a->named_parameters()) {
    INFO(item.key());
    CHECK(torch::equal(item.value(), b->named_parameters()[item.key()]));
    if (item.key().find("norm") == std::string::npos && item.key().find("bias") == std::string::npos)
      CHECK_FALSE(torch::equal(item.value(), other->named_parameters()[item.key()]));
  }
  CHECK(a->named_parameters()["norm.weight"].eq(1).all().item<bool>());
  CHECK(a->named_parameters()["velocity_head.bias"].eq(0).all().item<bool>());
}

TEST_CASE("unified: save -> load round trip is bitwise, names are the documented ones", "[unified]") {
  const models::UnifiedConfig c = models::unified_config_from_json(models::read_hf_config(fixture_dir()));
  for (const torch::Dtype dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
    INFO(c10::toString(dtype));
    UnifiedModel model(c, 11);
    model->to(dtype);
    test::TempDir dir("tandem_unified");
    models::save_unified(*model, dir.str());
    const nlohmann::json config = models::read_hf_config(dir.str());
    CHECK(config.at("model_type") == "tandem_unified");
    CHECK(models::unified_config_from_json(config).patch_size == c.patch_size);
    UnifiedModel loaded = models::load_unified(dir.str(), dtype);
    const auto expected = models::unified_param_shapes(c);
    const auto params = loaded->named_parameters();
    REQUIRE(params.size() == expected.size());
    for (const auto& [name, shape] : expected) {
      INFO(name);
      REQUIRE(params.contains(name));
      CHECK(params[name].sizes() == shape);
      CHECK(params[name].scalar_type() == dtype);
      CHECK(torch::equal(params[name], model->named_parameters()[name]));
    }
    torch::NoGradGuard no_grad;
    CHECK(torch::equal(loaded->forward(image_input()).velocity, model->forward(image_input()).velocity));
    // Control: the comparison sees a one-ulp change of one element.
    if (dtype == torch::kFloat64) {
      torch::Tensor w = loaded->named_parameters()["lm_head.weight"];
      const double x = w[2][3].item<double>();
      w[2][3] = std::nextafter(x, 1e300);
      CHECK_FALSE(torch::equal(w, model->named_parameters()["lm_head.weight"]));
    }
  }
  // The fixture's file holds exactly these names.
  const auto tensors = models::load_hf_weights(fixture_dir());
  CHECK(tensors.size() == models::unified_param_shapes(c).size());
  CHECK(tensors.count("layers.1.self_attn.o_proj.weight") == 1);
  CHECK(tensors.count("t_embed.fc1.weight") == 1);
}

TEST_CASE("unified: loading refuses missing, unexpected and misshapen tensors, naming each", "[unified]") {
  UnifiedModel model = fixture_model();
  auto tensors = models::load_hf_weights(fixture_dir());
  tensors.erase("layers.1.mlp.up_proj.weight");
  tensors["extra.weight"] = torch::zeros({2});
  tensors["pos_embed"] = torch::zeros({15, 32});
  try {
    models::load_unified_state(*model, tensors, "dir");
    FAIL("no error");
  } catch (const UserError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("missing layers.1.mlp.up_proj.weight"));
    CHECK_THAT(msg, Catch::Contains("unexpected extra.weight"));
    CHECK_THAT(msg, Catch::Contains("pos_embed has shape [15, 32], expected [16, 32]"));
  }
}

TEST_CASE("UnifiedConfig: validate and config.json name the bad field", "[unified]") {
  const models::UnifiedConfig good = models::unified_config_from_json(models::read_hf_config(fixture_dir()));
  CHECK_NOTHROW(good.validate());
  const auto fails = [&](auto edit, const std::string& needle) {
    models::UnifiedConfig c = good;
    edit(c);
    INFO(needle);
    CHECK_THROWS_AS(c.validate(), std::invalid_argument);
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("UnifiedConfig: ") && Catch::Contains(needle));
  };
  fails([](auto& c) { c.vocab_size = 0; }, "vocab_size");
  fails([](auto& c) { c.hidden_size = -1; }, "hidden_size");
  fails([](auto& c) { c.num_layers = 0; }, "num_layers");
  fails([](auto& c) { c.num_heads = 5; }, "num_heads 5 does not divide hidden_size 32");
  fails([](auto& c) { c.num_heads = 32; }, "odd head_dim");
  fails([](auto& c) { c.intermediate_size = 0; }, "intermediate_size");
  fails([](auto& c) { c.max_text_len = 0; }, "max_text_len");
  fails([](auto& c) { c.image_size = 0; }, "image_size");
  fails([](auto& c) { c.channels = 0; }, "channels");
  fails([](auto& c) { c.patch_size = 3; }, "patch_size 3 does not divide image_size 8");
  fails([](auto& c) { c.rope_theta = 0; }, "rope_theta");
  fails([](auto& c) { c.rms_eps = -1e-6; }, "rms_eps");
  const nlohmann::json j = models::to_json(good, torch::kFloat32);
  const models::UnifiedConfig back = models::unified_config_from_json(j);
  CHECK(models::to_json(back, torch::kFloat32) == j);
  const auto json_fails = [&](auto edit, const std::string& needle) {
    nlohmann::json bad = j;
    edit(bad);
    CHECK_THROWS_WITH(models::unified_config_from_json(bad, "cfg.json"),
                      Catch::Contains("cfg.json") && Catch::Contains(needle));
  };
  json_fails([](auto& b) { b.erase("num_heads"); }, "num_heads is missing");
  json_fails([](auto& b) { b["hidden_size"] = "32"; }, "hidden_size must be an integer");
  json_fails([](auto& b) { b["patch_szie"] = 2; }, "patch_szie is not a UnifiedConfig key");
  json_fails([](auto& b) { b["model_type"] = "llama"; }, "model_type");
}

TEST_CASE("unified: malformed inputs are refused naming the problem", "[unified]") {
  UnifiedModel model = fixture_model(torch::kFloat32);
  const torch::Tensor ids = fx("image.prompt_ids"), len = fx("image.prompt_lengths");
  const auto refuses = [&](const UnifiedInput& in, const std::string& needle) {
    CHECK_THROWS_WITH(model->forward(in), Catch::Contains(needle));
  };
  refuses({ids, len.narrow(0, 0, 2), {}, {}}, "text_lengths must be (B)");
  refuses({torch::zeros({3, 9}, torch::kInt64), len, {}, {}}, "exceeds max_text_len 8");
  refuses({ids + 100, len, {}, {}}, "token ids");
  refuses({ids, len, fx("image.x_t"), {}}, "x_t and sigma");
  refuses({ids, len, torch::zeros({3, 2, 6, 6}), fx("image.sigma")}, "x_t must be (B, C, H, W)");
  refuses({ids, torch::tensor({4, 1, 0}, torch::kInt64), {}, {}}, "text_lengths must lie in [0, 3]");
  refuses({torch::zeros({3, 0}, torch::kInt64), torch::zeros({3}, torch::kInt64), {}, {}}, "T_text >= 1");
  // An empty prompt with an image is the unconditional case, not an error.
  CHECK(model
            ->velocity(torch::zeros({3, 0}, torch::kInt64), torch::zeros({3}, torch::kInt64), fx("image.x_t"),
                       fx("image.sigma"))
            .sizes() == fx("image.x_t").sizes());
}
