// The ATen ops PyTorch's optimizers and gradient clipping call with scalar arguments that tch's
// generated bindings drop (`alpha` of add, `value` of addcmul/addcdiv) or do not bind at all
// (the `_foreach_*` ops). Calling the very same ops with the same double scalars is what makes
// fe-host's updates bit-identical to `torch.optim` and `torch.nn.utils.clip_grad_*_`: a
// `mul` then `add` rounds twice where `add(other, alpha)` rounds once.
// Same conventions as shim.cpp: NULL on success, else a malloc'd first line of the error.

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

char *optim_error(const std::string &message) {
    auto first_line = message.substr(0, message.find('\n'));
    char *out = static_cast<char *>(std::malloc(first_line.size() + 1));
    if (out != nullptr) {
        std::memcpy(out, first_line.c_str(), first_line.size() + 1);
    }
    return out;
}

std::vector<at::Tensor> tensor_list(at::Tensor **tensors, int count) {
    std::vector<at::Tensor> out;
    out.reserve(count);
    for (int i = 0; i < count; ++i) {
        out.push_back(*tensors[i]);
    }
    return out;
}

#define FE_OPTIM_GUARD(body)                                                                       \
    try {                                                                                          \
        body;                                                                                      \
        return nullptr;                                                                            \
    } catch (const std::exception &e) {                                                            \
        return optim_error(e.what());                                                              \
    } catch (...) {                                                                                \
        return optim_error("unknown C++ exception");                                               \
    }

}  // namespace

extern "C" {

// self.add_(other, alpha=alpha)
char *fe_add_alpha_(at::Tensor *self, at::Tensor *other, double alpha) {
    FE_OPTIM_GUARD(self->add_(*other, alpha))
}

// self.add(other, alpha=alpha), a new tensor in *out
char *fe_add_alpha(at::Tensor *self, at::Tensor *other, double alpha, at::Tensor **out) {
    FE_OPTIM_GUARD(*out = new at::Tensor(self->add(*other, alpha)))
}

// self.addcmul_(a, b, value=value)
char *fe_addcmul_(at::Tensor *self, at::Tensor *a, at::Tensor *b, double value) {
    FE_OPTIM_GUARD(self->addcmul_(*a, *b, value))
}

// self.addcmul(a, b, value=value), a new tensor in *out
char *fe_addcmul(at::Tensor *self, at::Tensor *a, at::Tensor *b, double value, at::Tensor **out) {
    FE_OPTIM_GUARD(*out = new at::Tensor(self->addcmul(*a, *b, value)))
}

// self.addcdiv_(a, b, value=value)
char *fe_addcdiv_(at::Tensor *self, at::Tensor *a, at::Tensor *b, double value) {
    FE_OPTIM_GUARD(self->addcdiv_(*a, *b, value))
}

// torch.nn.utils.clip_grad_norm_ (torch 2.11, foreach=None, error_if_nonfinite=False) over
// `grads` (defined, one device and dtype), writing the scaled gradients as new tensors into
// `out` (`count` slots; the inputs are left alone).
// `_foreach_norm`/`_foreach_mul_` are what PyTorch picks on CPU and CUDA alike, and
// `max_norm / t` is Tensor.__rtruediv__: `t.reciprocal() * max_norm`.
char *fe_clip_grad_norm(at::Tensor **grads, int count, double max_norm, double norm_type,
                        at::Tensor **out) {
    FE_OPTIM_GUARD({
        auto g = tensor_list(grads, count);
        auto norms = at::_foreach_norm(g, norm_type);
        auto total_norm = at::linalg_vector_norm(at::stack(norms), norm_type);
        auto coef = at::add(total_norm, 1e-6).reciprocal().mul(max_norm);
        auto clamped = at::clamp(coef, std::optional<at::Scalar>(), std::optional<at::Scalar>(1.0));
        auto scaled = at::_foreach_mul(g, clamped);
        for (int i = 0; i < count; ++i) {
            out[i] = new at::Tensor(scaled[i]);
        }
    })
}

// torch.nn.utils.clip_grad_value_ (foreach=None): clamp_min(-value) then clamp_max(value),
// into new tensors in `out`.
char *fe_clip_grad_value(at::Tensor **grads, int count, double value, at::Tensor **out) {
    FE_OPTIM_GUARD({
        auto g = tensor_list(grads, count);
        auto low = at::_foreach_clamp_min(g, -value);
        at::_foreach_clamp_max_(low, value);
        for (int i = 0; i < count; ++i) {
            out[i] = new at::Tensor(low[i]);
        }
    })
}

}  // extern "C"
