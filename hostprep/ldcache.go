package hostprep

import (
	"encoding/binary"
	"sort"
)

// Loader cache layout, glibc's "new" format (dl-cache.h), which ldconfig has
// written alone since glibc 2.32 and which nvidia-ctk reads from a driver
// root to find the driver's libraries.
const (
	ldCacheMagic   = "glibc-ld.so.cache1.1"
	ldHeaderSize   = 48
	ldEntrySize    = 24
	ldEndianLittle = 2      // cache_file_new_flags_endian_little
	ldFlagsX8664   = 0x0303 // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
)

// LoaderCache builds an ld.so.cache that maps each soname to its path, for
// the driver root: nvidia-ctk cdi generate finds libnvidia-ml through the
// root's /etc/ld.so.cache as it does on a real driver installation.
func LoaderCache(libs map[string]string) []byte {
	names := make([]string, 0, len(libs))
	for n := range libs {
		names = append(names, n)
	}
	// ldconfig's order: names compared as glibc's _dl_cache_libcmp does,
	// highest first; the loader's binary search relies on it.
	sort.Slice(names, func(i, j int) bool { return libcmp(names[i], names[j]) > 0 })

	strOff := ldHeaderSize + ldEntrySize*len(names)
	var strs []byte
	buf := make([]byte, strOff)
	copy(buf, ldCacheMagic)
	le := binary.LittleEndian
	le.PutUint32(buf[20:], uint32(len(names)))
	buf[28] = ldEndianLittle
	for i, n := range names {
		e := buf[ldHeaderSize+i*ldEntrySize:]
		le.PutUint32(e[0:], ldFlagsX8664)
		le.PutUint32(e[4:], uint32(strOff+len(strs))) // offsets count from the file's start
		strs = append(append(strs, n...), 0)
		le.PutUint32(e[8:], uint32(strOff+len(strs)))
		strs = append(append(strs, libs[n]...), 0)
	}
	le.PutUint32(buf[24:], uint32(len(strs)))
	return append(buf, strs...)
}

// libcmp orders sonames as glibc's _dl_cache_libcmp: runs of digits compare
// by value, anything else bytewise.
func libcmp(a, b string) int {
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case isDigit(a[i]) && isDigit(b[j]):
			x, y := 0, 0
			for ; i < len(a) && isDigit(a[i]); i++ {
				x = x*10 + int(a[i]-'0')
			}
			for ; j < len(b) && isDigit(b[j]); j++ {
				y = y*10 + int(b[j]-'0')
			}
			if x != y {
				return x - y
			}
		case isDigit(a[i]):
			return 1
		case isDigit(b[j]):
			return -1
		case a[i] != b[j]:
			return int(a[i]) - int(b[j])
		default:
			i++
			j++
		}
	}
	return (len(a) - i) - (len(b) - j)
}
