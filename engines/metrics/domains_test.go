package metrics

import (
	"reflect"
	"slices"
	"testing"
)

func TestCoverageDomains(t *testing.T) {
	d := CoverageDomains()
	if len(d) != 13 {
		t.Fatalf("%d coverage domains, want the paper's 13", len(d))
	}
	d[0] = "mutated"
	if CoverageDomains()[0] != "mathematics" {
		t.Fatal("CoverageDomains returned shared storage")
	}
	// Every domain is reachable by its own name.
	for _, name := range CoverageDomains() {
		if _, got, ok := NormalizeDomain(name); !ok || got != name {
			t.Errorf("NormalizeDomain(%q) = %q, %v", name, got, ok)
		}
	}
}

func TestNormalizeDomain(t *testing.T) {
	tests := []struct {
		label, norm, domain string
	}{
		// The embedded corpus's domains (datasets.EmbeddedDomains).
		{"mathematics", "mathematics", "mathematics"},
		{"physics", "physics", "physics"},
		{"chemistry", "chemistry", "chemistry"},
		{"biology-medicine", "biology-medicine", "biology"},
		{"computer-science", "computer-science", "computer-science"},
		{"engineering", "engineering", "engineering"},
		// Free-text disciplines.
		{"  Computer Science ", "computer-science", "computer-science"},
		{"Mathematics", "mathematics", "mathematics"},
		{"Applied_Mathematics", "applied-mathematics", "mathematics"},
		{"Mathematical Physics", "mathematical-physics", "physics"},
		{"Mathematical Statistics", "mathematical-statistics", "statistics"},
		{"Quantum Chemistry", "quantum-chemistry", "chemistry"},
		{"Computational Biology", "computational-biology", "biology"},
		{"Software Engineering", "software-engineering", "computer-science"},
		{"Mechanical Engineering", "mechanical-engineering", "engineering"},
		{"Artificial Intelligence", "artificial-intelligence", "computer-science"},
		{"Art History", "art-history", "humanities"},
		{"Earth & Planetary Sciences", "earth-planetary-sciences", "earth-science"},
		{"Planetary Science", "planetary-science", "astronomy"},
		{"Climate science", "climate-science", "earth-science"},
		{"Public Health", "public-health", "medicine"},
		{"Finance", "finance", "economics"},
		{"Psychology", "psychology", "social-science"},
		{"Philosophy", "philosophy", "humanities"},
		{"Geometry", "geometry", "mathematics"},
		{"Ökonomie", "ökonomie", ""},
		{"Neuroscience", "neuroscience", "biology"},
		{"Robotics", "robotics", "engineering"},
		{"Pharmacology", "pharmacology", "medicine"},
		{"Political science", "political-science", "social-science"},
		{"Probability", "probability", "statistics"},
		{"Education", "education", "social-science"},
		{"Law", "law", "humanities"},
		{"History", "history", "humanities"},
		{"Linguistics", "linguistics", "humanities"},
		{"Business", "business", "economics"},
		{"Cosmology", "cosmology", "astronomy"},
		{"Geology", "geology", "earth-science"},
		// arXiv categories, primary first.
		{"math.CO", "math.co", "mathematics"},
		{"cs.AI cs.LG", "cs.ai", "computer-science"},
		{"hep-th", "hep-th", "physics"},
		{"astro-ph.GA", "astro-ph.ga", "astronomy"},
		{"q-bio.NC, cs.NE", "q-bio.nc", "biology"},
		{"q-fin.PR", "q-fin.pr", "economics"},
		{"physics.chem-ph", "physics.chem-ph", "chemistry"},
		{"physics.ao-ph", "physics.ao-ph", "earth-science"},
		{"math.ST", "math.st", "statistics"},
		{"math.IT", "math.it", "computer-science"},
		{"physics.space-ph", "physics.space-ph", "astronomy"},
		{"physics.soc-ph", "physics.soc-ph", "social-science"},
		{"physics.hist-ph", "physics.hist-ph", "humanities"},
		{"physics.med-ph", "physics.med-ph", "medicine"},
		{"nlin.CD", "nlin.cd", "physics"},
		{"stat.ML", "stat.ml", "statistics"},
		{"eess.SP", "eess.sp", "engineering"},
		{"econ.EM", "econ.em", "economics"},
		{"cond-mat.stat-mech", "cond-mat.stat-mech", "physics"},
		// Unknown and empty.
		{"Cooking", "cooking", ""},
		{"", "", ""},
		{" -- ", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.label, func(t *testing.T) {
			norm, domain, ok := NormalizeDomain(tt.label)
			if norm != tt.norm || domain != tt.domain || ok != (tt.domain != "") {
				t.Fatalf("NormalizeDomain(%q) = %q, %q, %v; want %q, %q", tt.label, norm, domain, ok, tt.norm, tt.domain)
			}
		})
	}
}

func TestDomainCoverage(t *testing.T) {
	labels := []string{"Mathematics", "mathematics", "math.CO", "Physics", "hep-th",
		"biology-medicine", "Cooking", "cooking", "", "Knitting"}
	got := DomainCoverage(labels)
	want := Coverage{
		Labels:   7, // mathematics, math.co, physics, hep-th, biology-medicine, cooking, knitting
		Covered:  []string{"mathematics", "physics", "biology"},
		Share:    3.0 / 13,
		Unmapped: []string{"cooking", "knitting"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DomainCoverage = %+v, want %+v", got, want)
	}
	rev := slices.Clone(labels)
	slices.Reverse(rev)
	if again := DomainCoverage(rev); !reflect.DeepEqual(again, got) {
		t.Fatalf("label order changed coverage: %+v vs %+v", again, got)
	}
	if empty := DomainCoverage(nil); empty.Labels != 0 || empty.Share != 0 || empty.Covered != nil {
		t.Fatalf("DomainCoverage(nil) = %+v", empty)
	}
	var all []string
	all = append(all, CoverageDomains()...)
	if full := DomainCoverage(all); full.Share != 1 || len(full.Covered) != 13 {
		t.Fatalf("all 13 domains: %+v", full)
	}
}
