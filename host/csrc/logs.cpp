// What of libtorch's own log lines reaches the user in a data-parallel run. c10 writes its log
// records to std::cerr, one whole record per write: c10d's records are mostly noise fe-host
// reports better itself (a failed attempt to reach the store, every store call once a peer is
// gone, each with a C++ backtrace), but NCCL's watchdog, desync and flight-recorder reports are
// the main evidence in a multi-node hang. So in place of silencing c10 (FATAL), fe-host puts a
// filter on std::cerr: a record passes when it speaks of a watchdog, desync, flight recorder or
// heartbeat, and loses its backtrace on the way; every other record is dropped. Rust's own
// stderr (fe-host's messages) writes to the file descriptor and never goes through it.
// TORCH_CPP_LOG_LEVEL (PyTorch's knob) turns the filter off: the user asked for everything.

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <sstream>
#include <streambuf>
#include <string>

namespace {

// A c10 record's first line: `[W1128 06:54:29.123456 12345 file.cpp:12] message`.
bool starts_record(const std::string &line) {
    return line.size() > 6 && line[0] == '[' && std::strchr("IWEF", line[1]) != nullptr &&
           std::isdigit(static_cast<unsigned char>(line[2])) != 0;
}

bool is_evidence(const std::string &line) {
    std::string lower(line);
    for (auto &c : lower) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    for (const char *word : {"watchdog", "desync", "flight recorder", "heartbeat"}) {
        if (lower.find(word) != std::string::npos) {
            return true;
        }
    }
    return false;
}

// A C++ backtrace inside a record (c10::Error's what()): from here to the record's end.
bool starts_backtrace(const std::string &line) {
    return line.rfind("Exception raised from ", 0) == 0 || line.rfind("frame #", 0) == 0;
}

// The filter's state over a stream of lines; `keep` receives each line that passes.
class Sieve {
  public:
    template <typename Keep> void line(const std::string &text, Keep &&keep) {
        if (starts_record(text)) {
            keep_record_ = is_evidence(text);
            in_backtrace_ = false;
        }
        in_backtrace_ = in_backtrace_ || starts_backtrace(text);
        if (keep_record_ && !in_backtrace_) {
            keep(text);
        }
    }

  private:
    bool keep_record_ = false;
    bool in_backtrace_ = false;
};

// std::cerr's buffer while the filter is on: whole lines go to the original buffer.
class FilterBuf : public std::streambuf {
  public:
    explicit FilterBuf(std::streambuf *out) : out_(out) {}

  protected:
    int overflow(int c) override {
        if (c != traits_type::eof()) {
            char ch = static_cast<char>(c);
            xsputn(&ch, 1);
        }
        return traits_type::not_eof(c);
    }

    std::streamsize xsputn(const char *s, std::streamsize n) override {
        std::lock_guard<std::mutex> lock(mutex_);
        for (std::streamsize i = 0; i < n; ++i) {
            if (s[i] != '\n') {
                line_.push_back(s[i]);
                continue;
            }
            sieve_.line(line_, [this](const std::string &kept) {
                out_->sputn(kept.data(), static_cast<std::streamsize>(kept.size()));
                out_->sputc('\n');
                out_->pubsync();
            });
            line_.clear();
        }
        return n;
    }

  private:
    std::streambuf *out_;
    std::mutex mutex_;
    std::string line_;
    Sieve sieve_;
};

char *copy_out(const std::string &text) {
    char *out = static_cast<char *>(std::malloc(text.size() + 1));
    if (out != nullptr) {
        std::memcpy(out, text.c_str(), text.size() + 1);
    }
    return out;
}

}  // namespace

namespace fe_dist {

// Installs the filter on std::cerr once (its buffer lives for the process: libtorch's
// threads may log until the very end).
void filter_logs() {
    static std::once_flag once;
    std::call_once(once, [] {
        if (std::getenv("TORCH_CPP_LOG_LEVEL") != nullptr) {
            return;
        }
        constexpr int kWarning = 1;
        FLAGS_caffe2_log_level = kWarning;
        static FilterBuf *filter = new FilterBuf(std::cerr.rdbuf());
        std::cerr.rdbuf(filter);
    });
}

}  // namespace fe_dist

extern "C" {

// The lines of `text` the filter lets through (malloc'd; the caller frees it).
char *fe_logs_filter_text(const char *text) {
    Sieve sieve;
    std::string kept;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        sieve.line(line, [&kept](const std::string &k) { kept += k + "\n"; });
    }
    return copy_out(kept);
}

// What c10's own logger writes for a record of `severity` (0 INFO .. 2 ERROR) saying
// `message`, followed by a real c10::Error's text (message and backtrace) when `with_error`:
// the formats the filter is tested on (malloc'd).
char *fe_logs_c10_record(int severity, const char *message, bool with_error) {
    // Tests run on several threads: one capture of std::cerr at a time.
    static std::mutex capturing;
    std::lock_guard<std::mutex> lock(capturing);
    std::ostringstream captured;
    auto *previous = std::cerr.rdbuf(captured.rdbuf());
    auto level = FLAGS_caffe2_log_level;
    FLAGS_caffe2_log_level = 0;
    std::string text(message);
    if (with_error) {
        try {
            TORCH_CHECK(false, "the operation failed");
        } catch (const c10::Error &e) {
            text += "\n" + std::string(e.what());
        }
    }
    c10::MessageLogger(c10::SourceLocation::current(), severity)
            .stream()
        << text;
    FLAGS_caffe2_log_level = level;
    std::cerr.rdbuf(previous);
    return copy_out(captured.str());
}

}  // extern "C"
