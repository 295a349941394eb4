// Flow-matching pretraining loop. Deterministic from run.seed: batch k is images
// [k * batch, (k + 1) * batch) of the shapes dataset, noise from a seeded generator per batch.
#include "core/tracks/flow_pretrain.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "core/io/image_io.h"
#include "core/tasks/shapes.h"
#include "models/dit/sampler.h"
#include "models/safetensors.h"
#include "parallel/gradient_reduction.h"

namespace tandem {

FlowPretrainSummary pretrain_flow(models::FlowModel& model, std::vector<torch::Tensor> params, const Config& config,
                                  parallel::Communicator& dp, parallel::Communicator& grad,
                                  const std::optional<std::string>& save_dir,
                                  const std::function<void(int64_t)>& between) {
  const ImageTrackConfig& im = config.tracks.image;
  const ImagePretrainConfig& p = im.pretrain;
  tasks::ShapesDataset data(
      {im.model.image_size, im.model.channels, im.model.num_classes, static_cast<uint64_t>(config.run.seed)});
  if (params.empty()) params = model.parameters();
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(p.lr).weight_decay(0.0));
  const auto device = model.device();
  const auto dtype = model.dtype();
  const bool rank0 = dp.rank() == 0 && grad.rank() == 0;
  std::ofstream log;
  if (save_dir && rank0) {
    std::filesystem::create_directories(*save_dir);
    log.open(*save_dir + "/loss.jsonl", std::ios::trunc);
    if (!log) throw UserError(*save_dir + "/loss.jsonl: cannot be created; choose a directory you can write");
  }
  FlowPretrainSummary summary;
  double tail_sum = 0;
  int64_t tail_n = 0;
  const int64_t tail_from = p.steps - std::max<int64_t>(1, p.steps / 10);
  for (int64_t step = 0; step < p.steps; ++step) {
    // This rank's rows of the global batch.
    const int64_t per_rank = (p.batch_size + dp.size() - 1) / dp.size();
    const int64_t first = std::min(p.batch_size, dp.rank() * per_rank);
    const int64_t count = std::min(p.batch_size, first + per_rank) - first;
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(config.run.seed) * 1000003ULL + step);
    const tasks::ShapesBatch b = data.batch(step * p.batch_size, p.batch_size);
    const torch::Tensor noise = at::randn(b.images.sizes(), gen, torch::kFloat32);            // (B, C, H, W)
    const torch::Tensor s = torch::sigmoid(at::randn({p.batch_size}, gen, torch::kFloat32));  // (B) logit-normal
    const torch::Tensor drop = at::rand({p.batch_size}, gen, torch::kFloat32) < p.label_dropout;
    const torch::Tensor labels = torch::where(drop, torch::full_like(b.labels, model.null_label()), b.labels);
    auto rows = [&](const torch::Tensor& t) { return t.slice(0, first, first + count).to(device); };
    const torch::Tensor x0 = rows(b.images).to(dtype), eps = rows(noise).to(dtype);
    const torch::Tensor sig = rows(s).to(dtype);
    const torch::Tensor xt = (1 - sig.view({-1, 1, 1, 1})) * x0 + sig.view({-1, 1, 1, 1}) * eps;
    torch::Tensor loss = torch::zeros({}, x0.options());
    if (count > 0) {
      const torch::Tensor v = model.velocity(xt, sig, rows(labels));
      loss = (v - (eps - x0)).pow(2).flatten(1).mean(1).sum() / static_cast<double>(p.batch_size);
      loss.backward();
    }
    parallel::all_reduce_gradients(params, grad);
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    opt.step();
    opt.zero_grad();
    torch::Tensor l = torch::tensor({loss.item<double>()}, torch::kFloat64);
    dp.all_reduce(l);
    const double value = l.item<double>();
    if (step == 0) summary.first_loss = value;
    if (step >= tail_from) tail_sum += value, ++tail_n;
    if (between) between(step);
    if (log.is_open() && !(log << "{\"step\": " << step + 1 << ", \"loss\": " << value << "}\n" << std::flush))
      throw UserError(*save_dir + "/loss.jsonl: cannot write (disk full? out of quota?)");
    if ((step + 1) % std::max<int64_t>(1, p.steps / 10) == 0)
      spdlog::info("pretrain-flow {}/{} | velocity MSE {:.4f}", step + 1, p.steps, value);
  }
  summary.final_loss = tail_n ? tail_sum / tail_n : 0;
  if (save_dir && rank0) {
    models::save_safetensors(*save_dir + "/model.safetensors", model.named_tensors());
    std::vector<int64_t> labels;
    std::vector<models::NoiseKey> keys;
    for (int64_t row = 0; row < 4; ++row)
      for (int64_t c = 0; c < im.model.num_classes; ++c)
        labels.push_back(c), keys.push_back({static_cast<uint64_t>(config.run.seed), -2, c, row});
    torch::NoGradGuard no_grad;
    const torch::Tensor images = models::sample_ode(model, torch::tensor(labels, torch::kInt64).to(device), keys,
                                                    {im.sampler.eval_steps, im.sampler.shift, im.sampler.cfg});
    write_png_grid(*save_dir + "/samples.png", images.to(torch::kCPU).to(torch::kFloat32), im.model.num_classes);
    spdlog::info("pretrain-flow: weights, loss.jsonl and samples.png in {}", *save_dir);
  }
  return summary;
}

}  // namespace tandem
