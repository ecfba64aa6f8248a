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
#include <thread>

namespace fe_dist {

// Puts csrc/logs.cpp's filter on std::cerr (once): libtorch's log records about watchdogs and
// desyncs reach the user without backtraces, the rest (c10d's store noise) does not.
void filter_logs();

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

// Waits for `work`, polling (and yielding the core to any other runnable thread) for the first
// few milliseconds before blocking. A collective between busy ranks usually ends within a
// millisecond, and a blocked thread's wake-up — on a virtual machine, an idle vCPU's — costs
// about as much again: on 2 cores, 2 ranks trained LeNet ~10% faster polling. Longer waits
// (a straggler, a lost rank) block, so they do not burn a core until the timeout.
inline void wait_work(const c10::intrusive_ptr<c10d::Work> &work,
                      std::chrono::milliseconds timeout) {
    constexpr auto kPoll = std::chrono::milliseconds(5);
    auto until = std::chrono::steady_clock::now() + kPoll;
    while (!work->isCompleted() && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
    }
    work->wait(timeout);
}

inline void wait(const Group &group, const c10::intrusive_ptr<c10d::Work> &work) {
    wait_work(work, group.timeout);
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
