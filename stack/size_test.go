package stack_test

import (
	"os"
	"strconv"
)

// bulkSize is the size of the bulk transfer: 256 MiB, or
// MHISTACK_BULK_MIB MiB when set (the race-detector CI run sets it
// smaller: under -race the same bytes take minutes on 2 shared cores).
func bulkSize() int64 {
	if v, err := strconv.Atoi(os.Getenv("MHISTACK_BULK_MIB")); err == nil && v > 0 {
		return int64(v) << 20
	}
	return 256 << 20
}
