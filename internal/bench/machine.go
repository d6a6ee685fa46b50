package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where a benchmark ran, so every figure can be read
// against the cores it had and the load it shared them with.
type Machine struct {
	// NumCPU is the number of logical CPUs the Go runtime sees (nproc).
	NumCPU int `json:"num_cpu"`
	// CPUModel is /proc/cpuinfo's first "model name" ("" when unknown).
	CPUModel string `json:"cpu_model"`
	// MemTotalBytes is /proc/meminfo's MemTotal in bytes (0 when unknown).
	MemTotalBytes int64 `json:"mem_total_bytes"`
	// Kernel is /proc/sys/kernel/osrelease.
	Kernel string `json:"kernel"`
	// GoVersion is the toolchain that built the benchmark.
	GoVersion string `json:"go_version"`
	// GOOS and GOARCH name the platform.
	GOOS string `json:"goos"`
	// GOARCH is the architecture, runtime.GOARCH (e.g. "amd64").
	GOARCH string `json:"goarch"`
}

// ReadMachine collects the Machine facts from /proc. Missing files leave
// their fields empty: the facts annotate results and never fail a run.
func ReadMachine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = cpuModel(b)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemTotalBytes = memTotal(b)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func cpuModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func memTotal(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// LoadAvg is the kernel's 1-, 5- and 15-minute load averages: the number
// of runnable (and uninterruptible) tasks, averaged. On a machine shared
// with other jobs, a load above NumCPU means every wall-clock figure taken
// then measures the neighbours too.
type LoadAvg [3]float64

// String formats the averages as "1.23 4.56 7.89".
func (l LoadAvg) String() string { return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2]) }

// ReadLoadAvg reads /proc/loadavg. Errors: the file is missing or
// malformed (ParseLoadAvg's).
func ReadLoadAvg() (LoadAvg, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return LoadAvg{}, fmt.Errorf("read load average: %w", err)
	}
	return ParseLoadAvg(string(b))
}

// ParseLoadAvg parses the first three fields of /proc/loadavg's format
// ("0.52 0.58 0.59 1/467 12345", proc(5)). Errors name the bad field.
func ParseLoadAvg(s string) (LoadAvg, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return LoadAvg{}, fmt.Errorf("/proc/loadavg %q: want at least 3 fields, got %d", s, len(f))
	}
	var l LoadAvg
	for i := range 3 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) { // !(v >= 0) also rejects NaN
			return LoadAvg{}, fmt.Errorf("/proc/loadavg field %d %q: not a non-negative number", i+1, f[i])
		}
		l[i] = v
	}
	return l, nil
}

// parseVMHWM reads the VmHWM line of /proc/PID/status, in bytes.
func parseVMHWM(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "VmHWM:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmHWM %q: %w", f[1], err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM line in /proc/PID/status")
}
