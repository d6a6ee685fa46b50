package sandbox

import (
	"bytes"
	"encoding/binary"
	"runtime"
)

// Keyrings are not namespaced: a process of the sandbox running as the
// invoking user's uid can find that user's keys in /proc/keys and link them
// into its own keyrings, and the per-uid persistent keyring and key quota
// are shared by every sandbox of a uid (found by a red team). POSIX message
// queues live in the sandbox's IPC namespace, which outlives a program, and
// without an mqueue filesystem mounted their names cannot be listed to
// remove them: a channel between two programs of one sandbox. So under
// bubblewrap the sandbox gets a seccomp filter (bwrap --seccomp) that
// answers add_key(2), request_key(2), keyctl(2) and mq_open(3) (the only
// way to a message queue) with ENOSYS, as on a kernel without them: nothing
// in the sandbox needs them.

// Classic BPF opcodes and seccomp constants (linux/filter.h, linux/bpf_common.h,
// linux/seccomp.h, linux/audit.h).
const (
	bpfLdAbsW   = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK     = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfAndK     = 0x54 // BPF_ALU | BPF_AND | BPF_K
	bpfRetK     = 0x06 // BPF_RET | BPF_K
	retAllow    = 0x7fff0000
	retErrno    = 0x00050000
	errnoENOSYS = 38
	x32Bit      = 0x40000000 // __X32_SYSCALL_BIT: x32 calls keep x86_64's numbers
	offsetNr    = 0          // struct seccomp_data.nr
	offsetArch  = 4          // struct seccomp_data.arch
)

// keyArch is one audit architecture a process of the host can run code
// under, with its numbers of add_key, request_key, keyctl and mq_open.
type keyArch struct {
	audit uint32
	mask  uint32 // ANDed into the syscall number before comparing
	nrs   []uint32
}

// keyArches lists, per GOARCH, the native architecture and its 32-bit
// compat one (a program could switch to it from ctypes).
var keyArches = map[string][]keyArch{
	"amd64": {
		{audit: 0xc000003e, mask: ^uint32(x32Bit), nrs: []uint32{248, 249, 250, 240}}, // AUDIT_ARCH_X86_64 (and x32)
		{audit: 0x40000003, mask: ^uint32(0), nrs: []uint32{286, 287, 288, 277}},      // AUDIT_ARCH_I386
	},
	"arm64": {
		{audit: 0xc00000b7, mask: ^uint32(0), nrs: []uint32{217, 218, 219, 180}}, // AUDIT_ARCH_AARCH64
		{audit: 0x40000028, mask: ^uint32(0), nrs: []uint32{309, 310, 311, 274}}, // AUDIT_ARCH_ARM (EABI)
	},
}

// sockFilter is struct sock_filter (linux/filter.h).
type sockFilter struct {
	Code uint16
	Jt   uint8
	Jf   uint8
	K    uint32
}

// keyringFilter returns the compiled seccomp program (an array of struct
// sock_filter in the host's byte order, as bwrap --seccomp reads it) that
// makes add_key, request_key, keyctl and mq_open fail with ENOSYS and
// allows every other call; nil on a GOARCH it has no syscall numbers for.
func keyringFilter() []byte { return keyringFilterFor(runtime.GOARCH) }

// keyringFilterFor is keyringFilter for the given GOARCH.
func keyringFilterFor(goarch string) []byte {
	arches := keyArches[goarch]
	if arches == nil {
		return nil
	}
	// Layout: ld arch; per architecture a block {jeq arch else next block;
	// ld nr; and mask; jeq nr -> deny, one per number; ret allow}; ret
	// allow; deny.
	deny := 1 + 1 // index of the final "ret errno"
	for _, a := range arches {
		deny += 4 + len(a.nrs)
	}
	prog := []sockFilter{{Code: bpfLdAbsW, K: offsetArch}}
	for _, a := range arches {
		start, blockLen := len(prog), 4+len(a.nrs)
		prog = append(prog,
			sockFilter{Code: bpfJeqK, Jt: 0, Jf: uint8(blockLen - 1), K: a.audit},
			sockFilter{Code: bpfLdAbsW, K: offsetNr},
			sockFilter{Code: bpfAndK, K: a.mask},
		)
		for _, nr := range a.nrs {
			pc := len(prog)
			prog = append(prog, sockFilter{Code: bpfJeqK, Jt: uint8(deny - pc - 1), Jf: 0, K: nr})
		}
		prog = append(prog, sockFilter{Code: bpfRetK, K: retAllow})
		if len(prog)-start != blockLen {
			panic("sandbox: seccomp block layout")
		}
	}
	prog = append(prog,
		sockFilter{Code: bpfRetK, K: retAllow},
		sockFilter{Code: bpfRetK, K: retErrno | errnoENOSYS},
	)
	var b bytes.Buffer
	_ = binary.Write(&b, binary.NativeEndian, prog)
	return b.Bytes()
}
