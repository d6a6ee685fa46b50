package metrics

import (
	"slices"
	"testing"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"def reset(self, seed=None):", []string{"def", "reset", "self", "seed", "none"}},
		{"self.grid_size = 5", []string{"self", "grid_size", "grid", "size"}},
		{"numRooms HTTPServer", []string{"numrooms", "num", "rooms", "httpserver", "http", "server"}},
		{"__init__ _private", []string{"init", "private"}},
		{"x = 42 + 1e6 + 0x1f; y2 = 3rd", []string{"y2"}},
		{"max_2d_steps", []string{"max_2d_steps", "max", "steps"}},
		{"Größe ÜBER naïve", []string{"größe", "über", "naïve"}},
		{"a\xffbc", []string{"bc"}},
		{"# Reward: +1 on WIN, -1 on loss", []string{"reward", "on", "win", "on", "loss"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := Tokenize(tt.in); !slices.Equal(got, tt.want) {
				t.Fatalf("Tokenize(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
