// What csrc/dist.cpp and csrc/overlap.cpp share: a rank's membership in a Gloo group, and the
// shim's error convention (every entry point returns NULL or a malloc'd one-line message).

#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace fe_dist {

inline char *dist_error(const std::string &message) {
    auto first_line = message.substr(0, message.find('\n'));
    char *out = static_cast<char *>(std::malloc(first_line.size() + 1));
    if (out != nullptr) {
        std::memcpy(out, first_line.c_str(), first_line.size() + 1);
    }
    return out;
}

// One rank's membership: the store (kept alive for the group's lifetime) and the groups: Gloo
// always, and NCCL for a rank training on CUDA (csrc/nccl.cpp).
struct Group {
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
    c10::intrusive_ptr<c10d::Backend> nccl;
    std::chrono::milliseconds timeout;
};

// The group that carries `tensor`'s collectives: NCCL for CUDA tensors, Gloo for the rest.
inline c10d::Backend &backend_for(const Group &group, const at::Tensor &tensor) {
    if (tensor.is_cuda()) {
        if (!group.nccl) {
            throw std::runtime_error("a CUDA tensor in a collective of a rank without NCCL");
        }
        return *group.nccl;
    }
    return *group.gloo;
}

// csrc/nccl.cpp.
bool nccl_built();
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store> &store,
                                            int rank, int world,
                                            std::chrono::milliseconds timeout, int device);

// Buckets of at most this many bytes: DDP's default (25 MiB) keeps peak extra memory bounded
// while still sending few, large messages.
constexpr int64_t kBucketBytes = 25 * 1024 * 1024;

inline void wait(const Group &group, const c10::intrusive_ptr<c10d::Work> &work) {
    work->wait(group.timeout);
}

}  // namespace fe_dist

#define FE_DIST_GUARD(...)                                                                         \
    try {                                                                                          \
        __VA_ARGS__;                                                                               \
        return nullptr;                                                                            \
    } catch (const std::exception &e) {                                                            \
        return fe_dist::dist_error(e.what());                                                      \
    } catch (...) {                                                                                \
        return fe_dist::dist_error("unknown C++ exception");                                       \
    }
