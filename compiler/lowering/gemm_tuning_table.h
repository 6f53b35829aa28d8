// GemmTuningTable is the on-disk record of which kernel ran a GEMM shape
// faster on one GPU: grove's small-M kernel (small_m_gemm.h) or the device's
// library GEMM, as measured on that GPU. One JSON file, by default
// $GROVE_CACHE_DIR/gemm_tuning.json or ~/.cache/grove/gemm_tuning.json:
//
//   {"version": 1, "entries": {"<key>": {"grove_us": 1.9, "library_us": 5.2,
//                                       "grove_rows": 8}}}
//
// grove_rows is the kernel variant that took grove_us (rows of A per warp:
// Note [Small-M GEMM kernel]); an entry without it names the default variant.
// tiled_us, tiled_rows and tiled_columns (optional; and tiled_warps) are the fastest tile of
// cuda's tiled small-M kernel (Note [Small-M tiled GEMM]).
//
// A missing file is an empty table; a corrupt or unreadable one is ignored
// with a warning (and replaced by the next store), never an error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace grove::compiler::lowering {

struct GemmTuningEntry {
  double grove_us = 0;        // GPU time of grove's kernel per call, microseconds
  double library_us = 0;      // GPU time of the library GEMM per call
  int64_t grove_rows = 0;     // the fastest variant's rows per warp; 0: the default
  int64_t grove_columns = 1;  // ... and its columns per warp (Note [Small-M GEMM column tiles])
  // Note [Small-M tiled GEMM]: the fastest tile of cuda's tiled kernel and its
  // time; tiled_us 0: not timed (it did not qualify, or GROVE_SMALL_M_TILED=0).
  double tiled_us = 0;
  int64_t tiled_rows = 0;
  int64_t tiled_columns = 0;
  int64_t tiled_warps = 0;  // 0: chosen from K (an entry without it)
  bool grove_faster() const { return grove_us < library_us; }
  // Whether the tiled kernel beat both the generated kernel and the library,
  // each by at least `margin` of its time (Note [Tiled picks by a margin],
  // compiler/lowering/gemm_kernel_tuning.cc).
  bool tiled_fastest(double margin = 0) const {
    return tiled_us > 0 && tiled_rows > 0 && tiled_us < library_us * (1 - margin) &&
           tiled_us < grove_us * (1 - margin);
  }
};

class GemmTuningTable {
 public:
  explicit GemmTuningTable(std::filesystem::path path) : path_(std::move(path)) {}

  // $GROVE_CACHE_DIR/gemm_tuning.json when GROVE_CACHE_DIR is set, else
  // $HOME/.cache/grove/gemm_tuning.json (./.grove_cache/... without HOME).
  static std::filesystem::path default_path();

  // Replaces the entries by the file's. Never throws: a missing file gives an
  // empty table; an unreadable or corrupt file (or entry) is skipped with a
  // warning naming the file and what is wrong with it.
  void load();
  std::optional<GemmTuningEntry> find(const std::string& key) const;
  // Adds or replaces `key`, re-reads the file (to keep other processes'
  // entries) and writes it whole through a temporary file and a rename, so a
  // reader never sees half a file. Never throws: a failed write warns (the
  // entry stays in memory).
  void store(const std::string& key, const GemmTuningEntry& entry);

  const std::filesystem::path& path() const { return path_; }
  size_t size() const { return entries_.size(); }

 private:
  std::filesystem::path path_;
  std::map<std::string, GemmTuningEntry> entries_;
};

}  // namespace grove::compiler::lowering
