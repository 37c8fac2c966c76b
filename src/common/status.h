// Status and Result: the one error type of rfos.
//
// A Status is a code from the table below plus a human-readable message. Codes are grouped in ranges per
// component so a number alone says where an error was born. Status::ok() carries no allocation; errors
// allocate their message. Result<T> holds either a T or a non-OK Status (std::expected is C++23; this is
// the part of it rfos needs).
//
// Thread-safety: values; no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace rfos {

// X(name, number, errno, http) -- one table for every code.
#define RFOS_STATUS_CODES(X)              \
  X(kOk, 0, 0, 200)                       \
  /* generic 1..99 */                     \
  X(kInvalidArgument, 1, EINVAL, 400)     \
  X(kNotFound, 2, ENOENT, 404)            \
  X(kAlreadyExists, 3, EEXIST, 409)       \
  X(kNoSpace, 4, ENOSPC, 507)             \
  X(kIoError, 5, EIO, 500)                \
  X(kBusy, 6, EAGAIN, 503)                \
  X(kCorruption, 7, EIO, 500)             \
  X(kNotSupported, 8, EOPNOTSUPP, 501)    \
  X(kInternal, 9, EIO, 500)               \
  X(kTooLarge, 10, EFBIG, 413)            \
  X(kPermissionDenied, 11, EACCES, 403)   \
  X(kTimeout, 12, ETIMEDOUT, 504)         \
  X(kShutdown, 13, ESHUTDOWN, 503)        \
  /* engine 100..199 */                   \
  X(kChecksumMismatch, 100, EIO, 500)     \
  X(kEpochTooOld, 101, EINVAL, 409)       \
  X(kUnknownContainer, 102, ENOENT, 404)  \
  X(kUnknownPool, 103, ENOENT, 404)       \
  X(kWrongValueKind, 104, EINVAL, 400)    \
  X(kEngineFailed, 105, EIO, 500)         \
  /* namespace 200..299 */                \
  X(kNotEmpty, 200, ENOTEMPTY, 409)       \
  X(kNotDirectory, 201, ENOTDIR, 400)     \
  X(kIsDirectory, 202, EISDIR, 400)       \
  X(kNameTooLong, 203, ENAMETOOLONG, 400) \
  X(kNotPermitted, 204, EPERM, 403)       \
  X(kNoData, 205, ENODATA, 404)           \
  X(kTooManyLinks, 206, EMLINK, 400)      \
  X(kLoop, 207, ELOOP, 400)               \
  X(kRange, 208, ERANGE, 400)             \
  X(kGroupsNeeded, 209, EACCES, 403)

enum class StatusCode : uint16_t {
#define RFOS_X(name, num, err, http) name = num,
  RFOS_STATUS_CODES(RFOS_X)
#undef RFOS_X
};

// The code's name without the leading 'k' ("NotFound").
std::string_view status_code_name(StatusCode code);
int status_code_errno(StatusCode code);
int status_code_http(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status ok() { return Status(); }

  bool is_ok() const { return state_ == nullptr; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "NotFound: container 3f2a... is not on this target"
  std::string to_string() const;
  int to_errno() const { return status_code_errno(code()); }
  int to_http() const { return status_code_http(code()); }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

inline Status error(StatusCode code, std::string message) { return Status(code, std::move(message)); }

// Result<T>: a T on success, a non-OK Status otherwise.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::in_place_index<1>, std::move(status)) {}  // NOLINT

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  // OK when holding a value.
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace rfos

// Early return of a non-OK Status (from a Status or Result expression).
#define RFOS_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::rfos::Status rfos_status_ = (expr);           \
    if (!rfos_status_.is_ok()) return rfos_status_; \
  } while (0)

#define RFOS_CONCAT_INNER(a, b) a##b
#define RFOS_CONCAT(a, b) RFOS_CONCAT_INNER(a, b)
// RFOS_ASSIGN_OR_RETURN(auto x, expr): x = value of Result expr, or return its Status.
#define RFOS_ASSIGN_OR_RETURN(lhs, expr) RFOS_ASSIGN_OR_RETURN_IMPL(RFOS_CONCAT(rfos_result_, __LINE__), lhs, expr)
#define RFOS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.is_ok()) return tmp.status();           \
  lhs = std::move(tmp).value()
