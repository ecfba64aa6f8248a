// What csrc/dist.cpp and csrc/overlap.cpp share: a rank's membership in a Gloo group, and the
// shim's error convention (every entry point returns NULL or a malloc'd one-line message).

#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
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

// One rank's membership: the store (kept alive for the group's lifetime) and the group.
struct Group {
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
    std::chrono::milliseconds timeout;
};

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
