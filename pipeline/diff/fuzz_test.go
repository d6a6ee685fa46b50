package diff

import (
	"reflect"
	"testing"

	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// FuzzDecodeFile feeds arbitrary bytes to the generic row decoder that
// spade diff and gc tests use: a corrupt part file must give an error
// naming the file, never a panic or a hang.
func FuzzDecodeFile(f *testing.F) {
	valid, err := table.Encode(schemas.Rollouts, rollouts(40))
	if err != nil {
		f.Fatal(err)
	}
	metrics, err := table.Encode(schemas.Metrics, []schemas.Metric{{Name: "a", Value: 1}, {Name: "b", Skill: "x"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(valid[len(valid)/3:])
	f.Add(metrics)
	f.Add([]byte("PAR1PAR1"))
	f.Add([]byte{})
	info, _ := schemas.Lookup("rollouts")
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		err := decodeFile(info, "fuzz.parquet", data, func(v reflect.Value) error {
			if v.Type().Elem() != info.RowType {
				t.Fatalf("row of type %s", v.Type())
			}
			n++
			return nil
		})
		if err == nil && len(data) < 8 {
			t.Fatalf("%d bytes decoded without error", len(data))
		}
	})
}
