// The storages grove handed out through DLPack, found by address when the
// memory comes back as an input (Note [Stale hand-outs as inputs]).
#pragma once

#include <string>

#include "runtime/storage.h"

namespace grove::capi {

// Note [Stale hand-outs as inputs]
// A caller may keep an output and pass it back in later: a lazily built cache
// that a model stores on itself from a graph's output (Wav2Vec2-Conformer's
// rotary table, kept on the module by dynamo's attribute store and read by
// the next step's graph). The caller passes the memory as a bare pointer, so
// the view made of it is a new external storage that knows nothing of the
// output: once a generation end poisoned that output (its pool blocks
// reclaimed) or a later replay overwrote it, the call read whatever the pool
// held there by then, silently. Every storage handed out through DLPack is
// remembered here by its address range (a weak reference: nothing is kept
// alive), and each input's address is looked up before it is viewed: an input
// inside a handed-out storage that is poisoned or overwritten is refused with
// StaleTensorError naming the input and the output's own message, as an
// access through the output itself would be. Entries whose storage is gone
// are dropped as they are met. Tests: CApi.AStaleHandOutPassedBackInIsRefused
// (tests/capi/capi_test.cc).
void remember_handed_out(const runtime::StoragePtr& storage);

// Whether `data` lies inside a storage grove handed out that is now poisoned
// or overwritten; if so `*message` is that storage's own message.
bool inside_stale_hand_out(const void* data, std::string* message);

}  // namespace grove::capi
