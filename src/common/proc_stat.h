// Numeric fields of /proc/PID/stat, by their number in proc(5): 14 utime and 15 stime (clock ticks), 22 the
// start time. The command name (field 2) may hold spaces and parentheses: fields are counted from its last ')'.
//
// Thread-safety: a function.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace rfos {

// The fields asked for, in order, from one read of the file; empty when the process is gone or a field is missing.
std::vector<uint64_t> proc_stat_fields(uint64_t pid, std::initializer_list<int> fields);

// User and system CPU seconds of process `pid` (fields 14 and 15), or -1 when it is gone; of this process.
double cpu_seconds_of(uint64_t pid);
double cpu_seconds_of_self();

}  // namespace rfos
