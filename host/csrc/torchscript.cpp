// What fe-host needs from a TorchScript module that tch's CModule does not expose: its buffers
// (batch-norm statistics must be checkpointed and exported like parameters) and the signature
// of `forward` (to refuse a manifest whose keys do not fit before training starts). `module`
// is the `torch::jit::Module*` behind tch's CModule. Every entry point catches exceptions and
// returns an error message (malloc'd, freed by the caller) or NULL.

#include <torch/script.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

namespace {

char *ts_copy(const std::string &text) {
    char *out = static_cast<char *>(std::malloc(text.size() + 1));
    if (out != nullptr) {
        std::memcpy(out, text.c_str(), text.size() + 1);
    }
    return out;
}

char *ts_error(const std::string &message) { return ts_copy(message.substr(0, message.find('\n'))); }

#define FE_TS_GUARD(body)                                                                          \
    try {                                                                                          \
        body;                                                                                      \
        return nullptr;                                                                            \
    } catch (const std::exception &e) {                                                            \
        return ts_error(e.what());                                                                 \
    } catch (...) {                                                                                \
        return ts_error("unknown C++ exception");                                                  \
    }

// A return type as text; a NamedTuple (torchvision's `GoogLeNetOutputs`, say) as
// `NamedTuple(logits: Tensor, aux: Tensor?)`, since its own `str()` gives only its class name
// and the host maps its fields to keys.
std::string describe_return(const c10::TypePtr &type) {
    auto tuple = type->cast<c10::TupleType>();
    if (!tuple) {
        return type->str();
    }
    auto names = tuple->names();
    if (!names) {
        return type->str();
    }
    std::ostringstream text;
    text << "NamedTuple(";
    const auto &elements = tuple->elements();
    for (size_t i = 0; i < elements.size() && i < names->size(); ++i) {
        text << (i ? ", " : "") << (*names)[i] << ": " << elements[i]->str();
    }
    text << ')';
    return text.str();
}

}  // namespace

extern "C" {

// Calls `f(data, name, tensor)` for every buffer of the module and its submodules, with a new
// `at::Tensor` sharing the buffer's storage (the callee owns it).
char *fe_ts_named_buffers(torch::jit::Module *module, void *data,
                          void (*f)(void *, const char *, at::Tensor *)) {
    FE_TS_GUARD({
        for (const auto &buffer : module->named_buffers(/*recurse=*/true)) {
            f(data, buffer.name.c_str(), new at::Tensor(buffer.value));
        }
    })
}

// The signature of `forward`, one line per argument after `self`: `name<TAB>type<TAB>0|1`
// (1 when it has a default), then `->`<TAB>return type. `*out` is malloc'd.
char *fe_ts_forward_signature(torch::jit::Module *module, char **out) {
    FE_TS_GUARD({
        auto method = module->find_method("forward");
        if (!method) {
            throw std::runtime_error("the module has no `forward` method");
        }
        const auto &schema = method->function().getSchema();
        std::ostringstream text;
        const auto &arguments = schema.arguments();
        for (size_t i = 1; i < arguments.size(); ++i) {
            text << arguments[i].name() << '\t' << arguments[i].type()->str() << '\t'
                 << (arguments[i].default_value().has_value() ? 1 : 0) << '\n';
        }
        for (const auto &ret : schema.returns()) {
            text << "->\t" << describe_return(ret.type()) << '\n';
        }
        *out = ts_copy(text.str());
    })
}

// The name of the autograd node that produced `tensor` (empty when none), so tests can tell
// an eager backward (`SoftmaxBackward0`) from TorchScript's autodiff subgraph. `*out` is malloc'd.
char *fe_ts_grad_fn_name(const at::Tensor *tensor, char **out) {
    FE_TS_GUARD({
        const auto &node = tensor->grad_fn();
        *out = ts_copy(node ? node->name() : std::string());
    })
}

}  // extern "C"
