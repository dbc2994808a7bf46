package gen

// MaxSnapshotBytes bounds a snapshot file: `nvmock profile compile` refuses
// to write a larger one and the library refuses to map one, so a bad
// profile or a damaged file cannot cost every NVML process megabytes. The
// largest snapshot a valid profile gives is about 2.1 MiB (64 GPUs, each
// with 8 memory clocks of 1024 graphics clocks: the header, then per GPU
// its device record and 4 * (8 + 8*1024) bytes of clocks; see
// TestTheLargestValidProfileFitsTheLimit); 8 MiB leaves room for the
// device record to grow.
const MaxSnapshotBytes = 8 << 20
