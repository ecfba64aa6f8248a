// fe-host's shim over libtorch for what tch does not expose: fused optimizer kernels, CPU
// autocast, and generator state. Compiled against the same libtorch headers as torch-sys.
// Tensors arrive as the `at::Tensor*` that tch's C_tensor pointers are. Every entry point
// catches exceptions and returns an error message (malloc'd, freed by the caller) or NULL.

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

char *error_copy(const std::string &message) {
    auto first_line = message.substr(0, message.find('\n'));
    char *out = static_cast<char *>(std::malloc(first_line.size() + 1));
    if (out != nullptr) {
        std::memcpy(out, first_line.c_str(), first_line.size() + 1);
    }
    return out;
}

std::vector<at::Tensor> list(at::Tensor **tensors, int count) {
    std::vector<at::Tensor> out;
    out.reserve(count);
    for (int i = 0; i < count; ++i) {
        out.push_back(*tensors[i]);
    }
    return out;
}

#define FE_GUARD(body)                                                                             \
    try {                                                                                          \
        body;                                                                                      \
        return nullptr;                                                                            \
    } catch (const std::exception &e) {                                                            \
        return error_copy(e.what());                                                               \
    } catch (...) {                                                                                \
        return error_copy("unknown C++ exception");                                                \
    }

}  // namespace

extern "C" {

// One fused Adam (or AdamW) step over every parameter; `steps` are float scalar tensors that
// the caller has already incremented. With `found_inf` (nullable; a one-element float tensor
// on the parameters' device, 0 or 1) the kernel skips the update on the device when it is 1,
// as PyTorch's GradScaler has fused optimizers do: the host never reads the flag.
char *fe_fused_adam(at::Tensor **params, at::Tensor **grads, at::Tensor **exp_avgs,
                    at::Tensor **exp_avg_sqs, at::Tensor **max_exp_avg_sqs, at::Tensor **steps,
                    int count, double lr, double beta1, double beta2, double weight_decay,
                    double eps, bool amsgrad, bool decoupled, at::Tensor *found_inf) {
    FE_GUARD({
        auto p = list(params, count);
        auto g = list(grads, count);
        auto m = list(exp_avgs, count);
        auto v = list(exp_avg_sqs, count);
        auto vmax = amsgrad ? list(max_exp_avg_sqs, count) : std::vector<at::Tensor>{};
        auto s = list(steps, count);
        std::optional<at::Tensor> inf;
        if (found_inf != nullptr) {
            inf = *found_inf;
        }
        if (decoupled) {
            at::_fused_adamw_(p, g, m, v, vmax, s, lr, beta1, beta2, weight_decay, eps, amsgrad,
                              false, std::nullopt, inf);
        } else {
            at::_fused_adam_(p, g, m, v, vmax, s, lr, beta1, beta2, weight_decay, eps, amsgrad,
                             false, std::nullopt, inf);
        }
        // The fused kernels write the parameters without bumping their version counters, so a
        // later backward pass through a graph that saved them would silently use the updated
        // weights. Bumping makes libtorch refuse it, as every other in-place update does.
        for (auto &param : p) {
            param.unsafeGetTensorImpl()->bump_version();
        }
    })
}

// Divides every gradient by the scale (`inv_scale` holds its inverse) and sets `found_inf` to 1
// when any of them holds an infinity or NaN: one fused call, and no device-to-host copy.
char *fe_unscale_grads(at::Tensor **grads, int count, at::Tensor *found_inf,
                       at::Tensor *inv_scale) {
    FE_GUARD({
        auto g = list(grads, count);
        at::_amp_foreach_non_finite_check_and_unscale_(g, *found_inf, *inv_scale);
    })
}

// Turns autocast for `device_type` (0 = CPU, 1 = CUDA) on with `half` (float16) or bfloat16,
// or off, keeping libtorch's nesting count balanced.
char *fe_autocast(int device_type, bool half, bool enabled) {
    FE_GUARD({
        auto device = device_type == 0 ? at::kCPU : at::kCUDA;
        if (enabled) {
            at::autocast::set_autocast_dtype(device, half ? at::kHalf : at::kBFloat16);
            at::autocast::set_autocast_enabled(device, true);
            at::autocast::increment_nesting();
        } else {
            at::autocast::set_autocast_enabled(device, false);
            if (at::autocast::decrement_nesting() == 0) {
                at::autocast::clear_cache();
            }
        }
    })
}

// The state of the default generator of `device_type` (0 = CPU, 1 = CUDA) / `index`, as a
// uint8 tensor written to `*out`.
char *fe_generator_state(int device_type, int index, at::Tensor **out) {
    FE_GUARD({
        auto device = device_type == 0 ? at::Device(at::kCPU)
                                       : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
        auto generator = at::globalContext().defaultGenerator(device);
        std::lock_guard<std::mutex> lock(generator.mutex());
        *out = new at::Tensor(generator.get_state());
    })
}

// Restores what fe_generator_state returned.
char *fe_set_generator_state(int device_type, int index, at::Tensor *state) {
    FE_GUARD({
        auto device = device_type == 0 ? at::Device(at::kCPU)
                                       : at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
        auto generator = at::globalContext().defaultGenerator(device);
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(*state);
    })
}

// Deterministic algorithms everywhere (an op without a deterministic implementation then
// throws, naming itself), deterministic cuDNN, and no cuDNN autotuning, which picks kernels by
// timing.
char *fe_set_deterministic(bool on) {
    FE_GUARD({
        at::globalContext().setDeterministicAlgorithms(on, false);
        at::globalContext().setDeterministicCuDNN(on);
        if (on) {
            at::globalContext().setBenchmarkCuDNN(false);
        }
    })
}

// cuDNN autotuning (faster convolutions after the first batches of each shape).
char *fe_set_cudnn_benchmark(bool on) {
    FE_GUARD({ at::globalContext().setBenchmarkCuDNN(on); })
}

// The caching allocator's aggregate statistics of accelerator `index`: peak allocated, peak
// reserved, current allocated, current reserved bytes; then peaks are reset so the next call
// covers what happened since.
char *fe_memory_stats(int index, int64_t *out) {
    FE_GUARD({
        auto device = static_cast<c10::DeviceIndex>(index);
        auto stats = at::accelerator::getDeviceStats(device);
        const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
        out[0] = stats.allocated_bytes[aggregate].peak;
        out[1] = stats.reserved_bytes[aggregate].peak;
        out[2] = stats.allocated_bytes[aggregate].current;
        out[3] = stats.reserved_bytes[aggregate].current;
        at::accelerator::resetPeakStats(device);
    })
}

// The CUDA runtime and cuDNN versions libtorch was built with (0 when it has no CUDA).
char *fe_cuda_versions(long *out) {
    FE_GUARD({
        const auto &hooks = at::detail::getCUDAHooks();
        out[0] = hooks.hasCUDART() ? hooks.versionCUDART() : 0;
        out[1] = 0;
        try {
            out[1] = hooks.versionCuDNN();
        } catch (...) {
        }
    })
}

}  // extern "C"
