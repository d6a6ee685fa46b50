package metrics

import (
	"slices"
	"strings"
	"unicode"
)

// coverageDomains is the fixed list of 13 coarse domains over which domain
// coverage is measured. The SPADE paper (app. F) reports coverage of 13
// domains without listing them; this list is ours, chosen so that every
// arXiv archive, every domain of the embedded corpus
// (datasets.EmbeddedDomains) and common discipline names land in exactly
// one entry. See docs/metrics.md.
var coverageDomains = [...]string{
	"mathematics",
	"statistics",
	"physics",
	"astronomy",
	"chemistry",
	"biology",
	"medicine",
	"earth-science",
	"computer-science",
	"engineering",
	"economics",
	"social-science",
	"humanities",
}

// CoverageDomains returns the 13 domains of DomainCoverage, in the fixed
// order in which coverage reports list them. The slice is a copy.
func CoverageDomains() []string {
	return slices.Clone(coverageDomains[:])
}

// arxivArchives maps arXiv archive names (https://arxiv.org/category_taxonomy)
// to a domain; arxivSubjects overrides it for cross-disciplinary subject
// classes whose home is another domain.
var arxivArchives = map[string]string{
	"math": "mathematics", "stat": "statistics", "cs": "computer-science",
	"econ": "economics", "q-fin": "economics", "eess": "engineering",
	"q-bio": "biology", "astro-ph": "astronomy",
	"physics": "physics", "cond-mat": "physics", "gr-qc": "physics",
	"hep-ex": "physics", "hep-lat": "physics", "hep-ph": "physics",
	"hep-th": "physics", "math-ph": "physics", "nlin": "physics",
	"nucl-ex": "physics", "nucl-th": "physics", "quant-ph": "physics",
}

var arxivSubjects = map[string]string{
	"math.st": "statistics", "math.mp": "physics", "math.it": "computer-science",
	"physics.chem-ph": "chemistry", "physics.bio-ph": "biology",
	"physics.med-ph": "medicine", "physics.geo-ph": "earth-science",
	"physics.ao-ph": "earth-science", "physics.space-ph": "astronomy",
	"physics.soc-ph": "social-science", "physics.ed-ph": "social-science",
	"physics.hist-ph": "humanities",
}

// domainRules map discipline names to domains by keyword. Rules are tried
// in order and the first rule with a keyword matching any word of the
// normalised label wins, which settles compound names: "quantum
// chemistry" is chemistry (chemistry before physics), "mathematical
// physics" physics, "computational biology" biology, "software
// engineering" computer science, "earth and planetary sciences" earth
// science. A keyword of 4+ letters matches a word
// prefix ("statist" matches "statistical"); a shorter one only a whole
// word, so "art" does not match "artificial".
var domainRules = []struct {
	domain   string
	keywords []string
}{
	{"computer-science", []string{"software", "programming", "algorithm", "algorithms", "database", "cryptograph", "compiler", "informatic", "artificial"}},
	{"statistics", []string{"statist", "probabil"}},
	{"earth-science", []string{"earth", "geolog", "geophys", "geoscien", "geograph", "climat", "atmospher", "ocean", "meteorolog", "environment", "hydrolog", "seismolog"}},
	{"astronomy", []string{"astro", "cosmolog", "galax", "galact", "stellar", "planetar"}},
	{"biology", []string{"bio", "biolog", "genet", "genom", "ecolog", "neuro", "zoolog", "botan", "microbio", "life", "evolution"}},
	{"medicine", []string{"medic", "clinic", "health", "pharma", "patholog", "epidemiolog", "nursing", "surgery", "surgical"}},
	{"chemistry", []string{"chem", "chemi", "chemical"}},
	{"engineering", []string{"engineer", "electric", "electronic", "robot", "aerospace", "civil", "signal", "control"}},
	{"physics", []string{"physic", "quantum", "mechanics", "optic", "thermodynam", "relativ", "nuclear", "particle", "condensed"}},
	{"economics", []string{"econ", "financ", "business", "market", "accounting", "management"}},
	{"mathematics", []string{"math", "maths", "algebra", "geometr", "topolog", "calculus", "combinator", "arithmetic", "logic"}},
	{"social-science", []string{"social", "sociolog", "psycholog", "politic", "education", "anthropolog", "cognitive"}},
	{"humanities", []string{"histor", "philosoph", "linguist", "literat", "languag", "art", "arts", "music", "law", "legal", "religio", "ethic"}},
	{"computer-science", []string{"comput", "cs", "ai", "information", "data"}},
}

// NormalizeDomain normalises a grounding document's domain label and maps
// it to one of CoverageDomains.
//
// norm is the label as compared for distinctness: for an arXiv category
// list ("cs.AI cs.LG") the primary (first) category, lowercased; else
// the label lowercased (per rune, so normalising is idempotent) with every
// run of characters other than letters, digits and '.' turned into one '-',
// trimmed of '-' ("Computer Science" → "computer-science"). domain is the
// coverage domain, "" with ok false when no rule matches or norm is empty.
// Order of precedence: an exact coverage-domain name, an arXiv subject
// class, an arXiv archive, then the keyword rules described in
// docs/metrics.md.
func NormalizeDomain(label string) (norm, domain string, ok bool) {
	if first, isArxiv := arxivPrimary(label); isArxiv {
		norm = first
	} else {
		norm = normalizeLabel(label)
	}
	if norm == "" {
		return "", "", false
	}
	if slices.Contains(coverageDomains[:], norm) {
		return norm, norm, true
	}
	if d, found := arxivSubjects[norm]; found {
		return norm, d, true
	}
	archive, _, _ := strings.Cut(norm, ".")
	if d, found := arxivArchives[archive]; found && isArxivCategory(norm) {
		return norm, d, true
	}
	words := strings.FieldsFunc(norm, func(r rune) bool { return r == '-' || r == '.' })
	for _, rule := range domainRules {
		for _, kw := range rule.keywords {
			for _, w := range words {
				if w == kw || (len(kw) >= 4 && strings.HasPrefix(w, kw)) {
					return norm, rule.domain, true
				}
			}
		}
	}
	return norm, "", false
}

// arxivPrimary returns the first category of an arXiv category list
// (fields separated by spaces, commas or semicolons), lowercased, if that
// field is an arXiv category.
func arxivPrimary(label string) (string, bool) {
	fields := strings.FieldsFunc(label, func(r rune) bool {
		return unicode.IsSpace(r) || r == ',' || r == ';'
	})
	if len(fields) == 0 {
		return "", false
	}
	first := strings.ToLower(fields[0])
	if !isArxivCategory(first) {
		return "", false
	}
	return first, true
}

// isArxivCategory accepts a known archive alone ("hep-th") or with a
// subject class of ASCII letters and '-' ("math.co", "physics.chem-ph").
func isArxivCategory(s string) bool {
	archive, subject, hasSubject := strings.Cut(s, ".")
	if _, known := arxivArchives[archive]; !known {
		return false
	}
	if !hasSubject {
		return true
	}
	if subject == "" {
		return false
	}
	for _, r := range subject {
		if (r < 'a' || r > 'z') && r != '-' {
			return false
		}
	}
	return true
}

func normalizeLabel(label string) string {
	var b strings.Builder
	sep := false
	for _, r := range label {
		r = unicode.ToLower(r)
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' {
			if sep && b.Len() > 0 {
				b.WriteByte('-')
			}
			sep = false
			b.WriteRune(r)
			continue
		}
		sep = true
	}
	return b.String()
}

// Coverage is the domain coverage of a round's grounding documents.
type Coverage struct {
	// Labels is the number of distinct normalised domain labels among the
	// documents (NormalizeDomain's norm; empty labels are not counted).
	Labels int
	// Covered lists the coverage domains hit by at least one document, in
	// CoverageDomains order.
	Covered []string
	// Share is len(Covered) / 13, in [0, 1]: the paper's "domain coverage
	// (13 domains)".
	Share float64
	// Unmapped lists, sorted, the distinct normalised labels that map to
	// no coverage domain, so a new corpus's labels can be added to the
	// rules instead of silently lowering coverage.
	Unmapped []string
}

// DomainCoverage returns the coverage of labels, one domain label per
// grounding document (schemas.Slot.Domains flattened over a round's
// slots, or schemas.CorpusDoc.Domain). Duplicates are expected; the
// result does not depend on label order.
func DomainCoverage(labels []string) Coverage {
	norms := map[string]bool{}
	hit := map[string]bool{}
	unmapped := map[string]bool{}
	for _, l := range labels {
		norm, d, ok := NormalizeDomain(l)
		if norm == "" {
			continue
		}
		norms[norm] = true
		if ok {
			hit[d] = true
		} else {
			unmapped[norm] = true
		}
	}
	c := Coverage{Labels: len(norms)}
	for _, d := range coverageDomains {
		if hit[d] {
			c.Covered = append(c.Covered, d)
		}
	}
	c.Share = float64(len(c.Covered)) / float64(len(coverageDomains))
	c.Unmapped = SortedKeys(unmapped)
	return c
}
