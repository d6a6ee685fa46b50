package config

// Sandbox configures the Python sandbox (docs/sandbox.md).
type Sandbox struct {
	// Python is the interpreter that runs environments (default
	// /usr/bin/python3); it must be outside any home directory, which the
	// sandbox hides.
	Python string `yaml:"python" json:"python"`
	// Strict refuses to run without bubblewrap.
	Strict bool `yaml:"strict" json:"strict"`
	// CallTimeoutS is the wall-clock limit of one reset, step or close call,
	// in seconds (default 5, > 0), enforced with SIGKILL.
	CallTimeoutS float64 `yaml:"call_timeout_s" json:"call_timeout_s"`
	// MemoryMB is the address-space limit (RLIMIT_AS) per sandbox process,
	// in MiB (default 512, > 0).
	MemoryMB int `yaml:"memory_mb" json:"memory_mb"`
	// ForkEpisodes runs every episode in a forked child of the loaded
	// program instead of in the program's process (sandbox.Config
	// .ForkEpisodes). It can change what a program that keeps state outside
	// its instances returns, so it is pinned.
	//
	// Empty in the digest when false, so runs pinned before the setting
	// existed keep their digest.
	ForkEpisodes bool `yaml:"fork_episodes" json:"fork_episodes,omitempty"`
	// ProgramsPerSandbox is how many programs one bubblewrap sandbox serves
	// before it is replaced (sandbox.Config.ProgramsPerSandbox; 1 = a fresh
	// sandbox per program). Operational: every program runs in a fresh
	// process either way.
	ProgramsPerSandbox int `yaml:"programs_per_sandbox" json:"programs_per_sandbox,omitempty" spade:"operational"`
}

// DefaultSandbox is sandbox.*'s default: Debian's /usr/bin/python3, 5 s
// per call, 512 MiB per process, 256 programs per bubblewrap sandbox.
func DefaultSandbox() Sandbox {
	return Sandbox{Python: "/usr/bin/python3", CallTimeoutS: 5, MemoryMB: 512, ProgramsPerSandbox: 256}
}

// Check checks sandbox.*: finite numbers, counts, the call timeout and an
// absolute interpreter (the sandbox starts it from its own working
// directory).
func (s Sandbox) Check() []Problem {
	var p problems
	p.finite("sandbox", s)
	p.count("sandbox.memory_mb", s.MemoryMB)
	p.count("sandbox.programs_per_sandbox", s.ProgramsPerSandbox)
	p.timeout("sandbox.call_timeout_s", s.CallTimeoutS)
	p.absPath("sandbox.python", s.Python)
	return p
}
