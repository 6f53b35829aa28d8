// The arithmetic and the layout check every host group shares, so that ranks
// that are threads (HostRendezvous) and ranks that are processes
// (SocketHostGroup) compute bitwise the same results.
//
// Note [Host reduction order]: element i of a host all_reduce is the sum of
// the ranks' elements i taken in rank order (0, 1, ...), accumulated in double
// precision for floating dtypes (rounded once to the buffer's dtype at the
// end, after the division for kMean) and in the buffer's own type for
// integers. Every rank therefore gets the same bits whichever group carried the
// bytes, and a data-parallel run split over processes reproduces the threaded
// run exactly. Tests: SocketHostGroup.AllReduceEqualsTheThreadedOneBitwise,
// GroveRunProcesses.TwoRankProcessesReachTheThreadedLosses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/collectives/communicator.h"

namespace grove::runtime::collectives {

// destination[i] = reduce over `sources` (in rank order) of source[i], `count`
// elements of `dtype`. `destination` may be one of the sources.
void reduce_in_rank_order(const std::vector<const uint8_t*>& sources, uint8_t* destination,
                          int64_t count, DType dtype, ReduceOp op);

// Throws DTypeError when a buffer cannot be reduced (bool).
void check_reducible(const std::vector<Buffer>& buffers, ReduceOp op);

// Throws CommunicationError, naming group `group`, when rank `other`'s buffers
// (`theirs`) differ from rank `rank`'s (`mine`) in number, counts or dtypes.
void check_same_layouts(const std::string& group, int rank, const std::vector<Buffer>& mine,
                        int other, const std::vector<Buffer>& theirs);

}  // namespace grove::runtime::collectives
