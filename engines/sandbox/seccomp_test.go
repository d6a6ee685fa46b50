package sandbox

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// runFilter interprets the classic BPF subset keyringFilter emits for one
// struct seccomp_data (nr, arch) and returns the action.
func runFilter(t *testing.T, prog []byte, nr, arch uint32) uint32 {
	t.Helper()
	ins := make([]sockFilter, len(prog)/8)
	require.NoError(t, binary.Read(bytes.NewReader(prog), binary.NativeEndian, ins))
	var a uint32
	for pc := 0; pc < len(ins); pc++ {
		in := ins[pc]
		switch in.Code {
		case bpfLdAbsW:
			a = map[uint32]uint32{offsetNr: nr, offsetArch: arch}[in.K]
		case bpfAndK:
			a &= in.K
		case bpfJeqK:
			if a == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case bpfRetK:
			return in.K
		default:
			t.Fatalf("unexpected opcode %#x at %d", in.Code, pc)
		}
	}
	t.Fatal("the program fell off its end")
	return 0
}

func TestKeyringFilter(t *testing.T) {
	deny := uint32(retErrno | errnoENOSYS)
	for goarch, arches := range keyArches {
		prog := keyringFilterFor(goarch)
		require.NotNil(t, prog, goarch)
		for _, a := range arches {
			for _, nr := range a.nrs {
				require.Equal(t, deny, runFilter(t, prog, nr, a.audit), "%s arch %#x nr %d", goarch, a.audit, nr)
			}
			for _, nr := range []uint32{0, 1, 57, 200, 247, 251, 400} {
				want := uint32(retAllow)
				for _, k := range a.nrs {
					if nr == k {
						want = deny
					}
				}
				require.Equal(t, want, runFilter(t, prog, nr, a.audit), "%s arch %#x nr %d", goarch, a.audit, nr)
			}
		}
		// A number of another architecture is allowed on this one, and an
		// unknown architecture is allowed (the kernel refuses its calls).
		require.Equal(t, uint32(retAllow), runFilter(t, prog, 250, 0x12345678))
	}
	amd64 := keyringFilterFor("amd64")
	require.Equal(t, deny, runFilter(t, amd64, x32Bit|250, 0xc000003e), "x32 keyctl")
	require.Equal(t, uint32(retAllow), runFilter(t, amd64, 250, 0x40000003), "i386 250 is not keyctl")
	require.Nil(t, keyringFilterFor("riscv64"))
}
