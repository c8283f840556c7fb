// Command rediscache compares the cache backends under a shared load: memory
// (one gateway), Redis with the in-process vector index (redis-local) and
// Redis with RediSearch (redisearch), each with several frontdoor replicas on
// one redis-server. It stores a generated corpus of questions through the
// gateways, waits for the write-back to settle, then sends paraphrases of
// the stored questions and reports hit rates, errors and lookup latencies as
// a Markdown table.
//
//	go run ./bench/rediscache [-stores 20000] [-queries 20000] [-sizes 0,80000]
//	    [-conc 32] [-replicas 3] [-backends memory,redis-local,redisearch]
//
// See README.md beside this file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"frontdoor/bench/internal/load"
)

// opts are the command-line settings.
type opts struct {
	stores, queries, conc, replicas int
	sizes                           []int
	backends                        []string
	seed                            uint64
	settleQuiet, settleMax          time.Duration
	// Keys emitted into the gateways' config only when set.
	index, redisTimeout, cacheYAML string
	hnswM, efConstruction, efRun   int
	queryRPS                       float64
}

func main() {
	var o opts
	sizes := flag.String("sizes", "0,80000", "comma-separated distractor fills: entries stored before the measured stores")
	backends := flag.String("backends", "memory,redis-local,redisearch", "comma-separated backends: memory, redis-local, redisearch")
	flag.IntVar(&o.stores, "stores", 20000, "questions stored (Cache-Control: no-cache) before the queries")
	flag.IntVar(&o.queries, "queries", 20000, "paraphrased queries of stored questions (the measured phase)")
	flag.IntVar(&o.conc, "conc", 32, "concurrent clients, spread round-robin over the replicas")
	flag.Float64Var(&o.queryRPS, "query-rps", 0, "pace the queries at this many per second over all clients; 0: as fast as the clients get answers")
	flag.IntVar(&o.replicas, "replicas", 3, "frontdoor processes for the Redis backends (memory always runs one)")
	flag.Uint64Var(&o.seed, "seed", 1, "corpus and paraphrase seed")
	flag.DurationVar(&o.settleQuiet, "settle", 3*time.Second, "write-back has settled when no replica's vector count grew for this long (the gauge refreshes every 2s)")
	flag.DurationVar(&o.settleMax, "settle-max", 3*time.Minute, "longest wait for the write-back to settle")
	flag.StringVar(&o.index, "index", "", "cache.redis_index.type (hnsw|flat); unset: not emitted")
	flag.IntVar(&o.hnswM, "hnsw-m", 0, "cache.redis_index.m; 0: not emitted")
	flag.IntVar(&o.efConstruction, "ef-construction", 0, "cache.redis_index.ef_construction; 0: not emitted")
	flag.IntVar(&o.efRun, "ef-runtime", 0, "cache.redis_index.ef_runtime; 0: not emitted")
	flag.StringVar(&o.redisTimeout, "redis-timeout", "", "redis.timeout (e.g. 100ms); unset: the default")
	flag.StringVar(&o.cacheYAML, "cache-yaml", "", "extra YAML lines appended (indented) under cache:, e.g. 'coalesce: false'")
	flag.Parse()
	var err error
	if o.sizes, err = parseInts(*sizes); err != nil {
		fail(fmt.Errorf("-sizes: %w", err))
	}
	for _, b := range strings.Split(*backends, ",") {
		switch b = strings.TrimSpace(b); b {
		case "memory", "redis-local", "redisearch":
			o.backends = append(o.backends, b)
		case "":
		default:
			fail(fmt.Errorf("-backends: unknown backend %q (memory, redis-local, redisearch)", b))
		}
	}
	if o.stores < 1 || o.queries < 1 || o.conc < 1 || o.replicas < 1 || len(o.backends) == 0 || len(o.sizes) == 0 {
		fail(errors.New("-stores, -queries, -conc, -replicas must be >= 1 and -backends, -sizes non-empty"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rediscache:", err)
	os.Exit(1)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Corpus

// A domain is a family of questions: one of its templates with {A}, {S} and
// {X} replaced by an attribute, a subject and an extra (extras[0] is none).
// "[a|b]" picks one alternative each time a text is rendered: a stored
// question and its paraphrase pick independently, so synonyms live in the data.
type domain struct {
	templates, attrs, subjects, extras []string
}

// styles are optional closing requests, appended to a question.
var styles = []string{"",
	" [Keep it short|Be brief|Please answer briefly].",
	" [Explain it step by step|Walk me through it step by step].",
	" [Use simple words|Explain it in simple terms].",
	" [Give an example|Include an example].",
	" [Answer in one paragraph|Reply in a single paragraph].",
}

var whatTemplates = []string{
	"What is the {A} of {S}{X}?",
	"What's the {A} of {S}{X}?",
	"Tell me the {A} of {S}{X}.",
	"Do you know the {A} of {S}{X}?",
	"[Could|Can] you give me the {A} of {S}{X}?",
	"I'm looking for the {A} of {S}{X}.",
	"{S}: what is the {A}{X}?",
	"What is {S}'s {A}{X}?",
}

var howTemplates = []string{
	"How do I {A}{X}?",
	"How can I {A}{X}?",
	"What are the steps to {A}{X}?",
	"Can you explain how to {A}{X}?",
	"What's the [best|easiest] way to {A}{X}?",
	"I need to {A}{X}. How do I do that?",
	"[Help|Please help] me {A}{X}.",
	"Is there a way to {A}{X}?",
}

var domains = []domain{
	{ // chemistry
		templates: whatTemplates,
		attrs: []string{"[boiling point|boiling temperature]", "[melting point|melting temperature]", "density",
			"[molar mass|molecular weight]", "[chemical formula|molecular formula]", "[solubility in water|water solubility]",
			"flash point", "vapor pressure", "[specific heat capacity|specific heat]", "refractive index", "[pH|acidity]",
			"[autoignition temperature|ignition temperature]", "viscosity", "[thermal conductivity|heat conductivity]"},
		subjects: []string{"ethanol", "methanol", "acetone", "benzene", "toluene", "[glycerol|glycerin]", "acetic acid",
			"sulfuric acid", "ammonia", "[sodium chloride|table salt]", "[sodium bicarbonate|baking soda]", "hydrogen peroxide",
			"[isopropyl alcohol|isopropanol]", "ethylene glycol", "citric acid", "caffeine", "glucose", "[sucrose|table sugar]",
			"calcium carbonate", "potassium nitrate", "nitric acid", "hydrochloric acid", "formaldehyde", "chloroform",
			"hexane", "octane", "propane", "butane", "methane", "ethylene", "mercury", "lead", "copper", "[aluminium|aluminum]",
			"iron", "zinc", "tin", "silver", "gold", "tungsten", "titanium", "nickel", "magnesium", "lithium", "sodium",
			"potassium", "iodine", "bromine", "sulfur", "phosphorus", "carbon dioxide", "nitrogen", "oxygen", "helium",
			"argon", "ozone", "chlorine", "water", "heavy water", "olive oil", "paraffin wax", "naphthalene", "phenol", "urea",
			"aspirin", "ibuprofen", "[paracetamol|acetaminophen]", "nicotine", "[vitamin C|ascorbic acid]", "diethyl ether",
			"xylene", "styrene", "silicon", "graphite", "kerosene", "diesel fuel", "[gasoline|petrol]"},
		extras: []string{"", " at room temperature", " at [sea level|standard pressure]", " [in its pure form|when it is pure]"},
	},
	{ // geography
		templates: whatTemplates,
		attrs: []string{"[capital|capital city]", "population", "[official language|main language]", "currency",
			"[total area|land area]", "[highest mountain|tallest mountain]", "longest river", "[time zone|main time zone]",
			"national dish", "[largest city|biggest city]", "[main exports|most important exports]",
			"[form of government|political system]", "life expectancy", "[literacy rate|adult literacy rate]",
			"[calling code|international dialing code]"},
		subjects: []string{"France", "Germany", "Italy", "Spain", "Portugal", "the Netherlands", "Belgium", "Switzerland",
			"Austria", "Poland", "the Czech Republic", "Hungary", "Romania", "Bulgaria", "Greece", "Turkey", "Sweden", "Norway",
			"Finland", "Denmark", "Iceland", "Ireland", "[the United Kingdom|the UK]", "[the United States|the USA]", "Canada",
			"Mexico", "Guatemala", "Cuba", "Colombia", "Venezuela", "Ecuador", "Peru", "Bolivia", "Chile", "Argentina",
			"Uruguay", "Paraguay", "Brazil", "Morocco", "Algeria", "Tunisia", "Egypt", "Ethiopia", "Kenya", "Tanzania",
			"Uganda", "Nigeria", "Ghana", "Senegal", "South Africa", "Namibia", "Madagascar", "Saudi Arabia", "Iran", "Iraq",
			"Israel", "Jordan", "the United Arab Emirates", "Qatar", "Pakistan", "India", "Nepal", "Bangladesh", "Sri Lanka",
			"China", "Mongolia", "Japan", "South Korea", "Vietnam", "Thailand", "Cambodia", "Laos", "Malaysia", "Singapore",
			"Indonesia", "the Philippines", "Australia", "New Zealand", "Fiji", "Kazakhstan", "Uzbekistan", "Georgia",
			"Armenia", "Ukraine", "Lithuania", "Latvia", "Estonia", "Croatia", "Serbia", "Slovenia"},
		extras: []string{"", " [today|nowadays]", " [according to recent data|according to the latest figures]", " [this year|as of this year]"},
	},
	{ // devices
		templates: howTemplates,
		attrs: []string{"reset the password [of|on] my {S}", "update the firmware [of|on] my {S}",
			"[factory reset my {S}|restore my {S} to factory settings]", "[turn off|disable] automatic updates on my {S}",
			"[change|switch] the [language|display language] [of|on] my {S}", "[connect|hook up] my {S} to [Wi-Fi|my wireless network]",
			"fix the Bluetooth connection [of|on] my {S}", "[speed up my {S}|make my {S} faster]", "set up parental controls on my {S}",
			"back up the settings [of|on] my {S}", "find the serial number [of|on] my {S}", "[turn on|enable] dark mode on my {S}",
			"[stop|keep] my {S} from overheating", "change the time zone on my {S}", "[free up storage|clear space] on my {S}",
			"[reduce|lower] the power consumption of my {S}", "check the warranty [of|on] my {S}", "[register|activate] my new {S}",
			"turn off the [notifications|alerts] on my {S}", "[rename|change the name of] my {S}", "[restart|reboot] my {S} remotely",
			"find the IP address of my {S}", "[transfer|move] my data to a new {S}", "[update|upgrade] the software on my {S}"},
		subjects: []string{"Netgear router", "TP-Link router", "Asus router", "Linksys router", "HP printer", "Canon printer",
			"Epson printer", "Brother printer", "Samsung [TV|smart TV]", "LG [TV|smart TV]", "Sony [TV|smart TV]", "TCL [TV|smart TV]",
			"Dell laptop", "Lenovo laptop", "HP laptop", "Acer laptop", "MacBook", "iPad", "Samsung tablet", "Lenovo tablet",
			"iPhone", "Samsung [phone|smartphone]", "Xiaomi [phone|smartphone]", "Google Pixel", "OnePlus [phone|smartphone]",
			"Garmin watch", "Fitbit", "Apple Watch", "Samsung Galaxy Watch", "Sony earbuds", "AirPods", "Jabra earbuds",
			"JBL speaker", "Bose speaker", "Sonos speaker", "PlayStation", "Xbox", "Nintendo Switch", "Kindle", "Kobo e-reader",
			"Nest thermostat", "Ecobee thermostat", "Honeywell thermostat", "Arlo camera", "Ring doorbell", "Eufy camera",
			"Synology NAS", "QNAP NAS", "Eero mesh system", "Orbi mesh system", "Dell monitor", "LG monitor", "Roomba",
			"Roborock vacuum", "Amazon Echo", "Google Nest speaker", "Chromecast", "Apple TV", "Fire TV Stick", "Roku"},
		extras: []string{"", " without losing my [data|files|settings]", " [from my phone|using my phone]", " without the manual",
			" after a power outage", " [on my own|by myself]"},
	},
	{ // programming
		templates: []string{"How do I {A} in {S}{X}?", "How can I {A} in {S}{X}?", "What is the best way to {A} in {S}{X}?",
			"In {S}, how do I {A}{X}?", "Show me how to {A} in {S}{X}.", "{S}: how to {A}{X}?",
			"Can you explain how to {A} in {S}{X}?", "What's the idiomatic way to {A} in {S}{X}?"},
		attrs: []string{"reverse a string", "read a file line by line", "sort a list of [numbers|integers]",
			"[parse a JSON string|decode JSON]", "[make|send] an HTTP GET request", "[remove duplicates from a list|deduplicate a list]",
			"[convert a string to an integer|turn a string into an integer]", "get the current date and time",
			"split a string [by commas|on commas]", "check [if|whether] a file exists", "[create a directory|make a new folder]",
			"generate a random number", "[merge two dictionaries|combine two maps]", "count the words in a text",
			"read [environment variables|an environment variable]", "write a unit test", "[handle|deal with] errors",
			"run code in [the background|a background thread]", "connect to a PostgreSQL database",
			"round a number to two decimal places", "[find|get] the length of a list", "[iterate|loop] over a dictionary",
			"[measure|time] how long a function takes", "download a file from a URL", "compress a file with gzip",
			"compute a SHA-256 hash", "pad a string with [zeros|leading zeros]", "compare two strings ignoring case",
			"read command-line arguments", "escape HTML characters", "[serialize|encode] an object to JSON", "read a CSV file"},
		subjects: []string{"Python", "[Go|Golang]", "Rust", "Java", "JavaScript", "TypeScript", "C#", "C++", "Ruby", "PHP",
			"Kotlin", "Swift", "Scala", "Elixir", "Haskell", "Perl", "Lua", "R", "Julia", "Dart"},
		extras: []string{"", " [using only the standard library|with just the standard library]", " [efficiently|in an efficient way]",
			" [in a thread-safe way|safely from several threads]", " [for a beginner|as a beginner]", " [in one line|with a one-liner]"},
	},
	{ // cooking
		templates: []string{"How do I {A}{X}?", "What's the best way to {A}{X}?", "Any tips on how to {A}{X}?",
			"How should I {A}{X}?", "Can you explain how to {A}{X}?", "I want to {A}{X}. What should I do?",
			"Give me [instructions|directions] to {A}{X}.", "What is the right way to {A}{X}?"},
		attrs: []string{"[cook|make] {S} in an air fryer", "roast {S} in the oven", "grill {S}",
			"[store leftover {S}|keep leftover {S} fresh]", "freeze {S}", "[thaw|defrost] frozen {S}", "season {S}",
			"[reheat|warm up] {S}", "steam {S}", "[make|get] {S} crispy", "keep {S} from sticking to the pan", "marinate {S}",
			"[pick|choose] [fresh|good] {S} at the store", "cook {S} in a slow cooker", "pan-fry {S}", "cook {S} on a camping stove"},
		subjects: []string{"chicken breasts", "chicken wings", "salmon fillets", "potatoes", "broccoli", "tofu", "pork chops",
			"rice", "eggs", "carrots", "mushrooms", "zucchini", "shrimp", "[beef steak|steak]", "lamb chops", "sweet potatoes",
			"cauliflower", "green beans", "Brussels sprouts", "chickpeas", "lentils", "bacon", "sausages", "cod", "tuna steaks",
			"asparagus", "corn on the cob", "[eggplant|aubergine]", "bell peppers", "meatballs"},
		extras: []string{"", " for [a family of four|four people]", " [quickly|fast]", " [for meal prep|for the week ahead]",
			" [the healthy way|in a healthy way]", " [on a weeknight|after work]"},
	},
	{ // health
		templates: []string{"What are {A}{X}?", "Can you list {A}{X}?", "Tell me {A}{X}.", "What should I know about {A}{X}?",
			"Please explain {A}{X}.", "Could you describe {A}{X}?", "I'd like to understand {A}{X}.", "Can you tell me {A}{X}?"},
		attrs: []string{"the [symptoms|signs] of {S}", "the [usual|common] treatments for {S}", "the [main|most common] causes of {S}",
			"the risk factors for {S}", "the early warning signs of {S}", "the [possible complications|complications] of {S}",
			"the best ways to prevent {S}", "the [tests|exams] used to diagnose {S}", "the [home|natural] remedies for {S}",
			"the long-term effects of {S}"},
		subjects: []string{"[flu|influenza]", "migraine", "asthma", "type 2 diabetes", "[high blood pressure|hypertension]",
			"anemia", "bronchitis", "pneumonia", "sinusitis", "tonsillitis", "gout", "arthritis", "eczema", "psoriasis", "acne",
			"insomnia", "depression", "anxiety", "celiac disease", "lactose intolerance", "kidney stones", "gallstones",
			"shingles", "chickenpox", "measles", "Lyme disease", "food poisoning", "dehydration", "heat stroke",
			"vitamin D deficiency", "iron deficiency", "hypothyroidism", "sleep apnea", "tendinitis", "carpal tunnel syndrome",
			"plantar fasciitis", "[conjunctivitis|pink eye]", "ear infections", "strep throat", "[urinary tract infections|UTIs]"},
		extras: []string{"", " in [children|kids]", " in adults", " in [older people|the elderly]", " during pregnancy", " in athletes"},
	},
	{ // travel
		templates: []string{"Can you tell me {A}{X}?", "Tell me {A}{X}.", "I'd like to know {A}{X}.", "Do you know {A}{X}?",
			"What can you tell me about {A}{X}?", "Any advice on {A}{X}?", "Could you explain {A}{X}?", "I need [information|info] about {A}{X}."},
		attrs: []string{"the best time [to visit|to go to] {S}", "the cheapest way to get around {S}",
			"[the must-see sights|the top attractions] in {S}", "the [local food|dishes] to try in {S}",
			"a good [area|neighborhood] to stay in {S}", "the visa requirements for {S}", "the tipping [customs|etiquette] in {S}",
			"the public transport [options|system] in {S}", "the safest neighborhoods in {S}", "[good|the best] day trips from {S}",
			"the [typical|average] prices in {S}", "the [nightlife|bars and clubs] in {S}", "getting from the airport to the center of {S}"},
		subjects: []string{"Paris", "Rome", "Tokyo", "Kyoto", "Lisbon", "Barcelona", "Madrid", "Berlin", "Prague", "Vienna",
			"Budapest", "Amsterdam", "Copenhagen", "Stockholm", "Oslo", "Helsinki", "Dublin", "Edinburgh", "London", "New York",
			"Chicago", "San Francisco", "Los Angeles", "Mexico City", "Buenos Aires", "Rio de Janeiro", "Lima", "Cusco",
			"Cape Town", "Marrakech", "Cairo", "Istanbul", "Athens", "Dubai", "Mumbai", "Delhi", "Bangkok", "Hanoi", "Singapore",
			"Seoul", "Beijing", "Shanghai", "Hong Kong", "Taipei", "Sydney", "Melbourne", "Auckland", "Vancouver", "Montreal",
			"Reykjavik", "Krakow", "Florence", "Venice", "Naples", "Seville", "Porto", "Munich", "Zurich", "Bali", "Havana"},
		extras: []string{"", " on a [budget|tight budget]", " with [kids|children]", " in winter", " in summer",
			" for a first-time visitor", " [for a weekend|over a weekend]"},
	},
}

// systemPrompts × tenants are the semantic scopes.
var systemPrompts = []string{
	"You are a helpful assistant. Answer concisely and accurately.",
	"You are the customer support assistant of an electronics retailer. Be friendly and precise.",
	"You are a patient tutor. Explain things clearly, and say so when you are not sure.",
	"You are a practical assistant for travel, cooking and everyday life. Keep answers short and concrete.",
}

var tenants = []struct{ name, env, key string }{
	{"tenant-a", "FD_BENCH_KEYS_A", "bench-key-a"},
	{"tenant-b", "FD_BENCH_KEYS_B", "bench-key-b"},
}

// fact is one question: what it asks, in which scope, and its stored text.
type fact struct {
	d, t, a, s, x, y int // domain, template of the stored text, attribute, subject, extra, style
	tenant, system   int
	alt              uint64 // seed of the stored text's alternatives
	text             string
}

// corpus draws n distinct questions; the same seed gives the same corpus,
// and a longer corpus starts with a shorter one.
func corpus(seed uint64, n int) ([]fact, error) {
	rng := rand.New(rand.NewPCG(seed, 0xc0de))
	seen := make(map[[7]int]bool, n)
	out := make([]fact, 0, n)
	for draws := 0; len(out) < n; draws++ {
		if draws > 20*n { // about 1.6M distinct questions exist, drawn unevenly
			return nil, fmt.Errorf("corpus: only %d distinct questions after %d draws; ask for fewer stores and fill", len(out), draws)
		}
		f := fact{d: rng.IntN(len(domains)), tenant: rng.IntN(len(tenants)), system: rng.IntN(len(systemPrompts)), alt: rng.Uint64()}
		dm := &domains[f.d]
		f.t, f.a, f.s = rng.IntN(len(dm.templates)), rng.IntN(len(dm.attrs)), rng.IntN(len(dm.subjects))
		if rng.Float64() < 0.6 { // most questions have no extra, most no style
			f.x = 0
		} else {
			f.x = 1 + rng.IntN(len(dm.extras)-1)
		}
		if rng.Float64() < 0.7 {
			f.y = 0
		} else {
			f.y = 1 + rng.IntN(len(styles)-1)
		}
		k := [7]int{f.d, f.a, f.s, f.x, f.y, f.tenant, f.system}
		if seen[k] {
			continue
		}
		seen[k] = true
		f.text = f.render(f.altRand(), dm.templates[f.t])
		out = append(out, f)
	}
	return out, nil
}

func (f fact) altRand() *rand.Rand { return rand.New(rand.NewPCG(f.alt, 0xa17)) }

// render fills template with the fact's slots and picks the alternatives.
func (f fact) render(rng *rand.Rand, template string) string {
	dm := &domains[f.d]
	s := strings.ReplaceAll(template, "{A}", dm.attrs[f.a])
	s = strings.ReplaceAll(s, "{S}", dm.subjects[f.s])
	s = strings.ReplaceAll(s, "{X}", dm.extras[f.x])
	s += styles[f.y]
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '[')
		if i < 0 {
			b.WriteString(s)
			break
		}
		j := strings.IndexByte(s[i:], ']') + i
		alts := strings.Split(s[i+1:j], "|")
		b.WriteString(s[:i])
		b.WriteString(alts[rng.IntN(len(alts))])
		s = s[j+1:]
	}
	out := b.String()
	return strings.ToUpper(out[:1]) + out[1:]
}

// The paraphrase mix: the share of queries that keep the stored wording, that
// keep its phrasing but draw the synonyms again, and (the rest) that use
// another phrasing.
const (
	paraSameWording = 0.5
	paraSynonyms    = 0.2
)

var (
	prefixes = []string{"Hi, ", "Hello! ", "Hey, ", "Quick question: ", "Please, ", "Sorry to bother you, ", "Hi there. "}
	suffixes = []string{" Thanks!", " Thank you.", " Thanks in advance.", " Cheers.", " Please help.", " Thx"}
	// Words a sentence starts with that lose their capital after a prefix.
	lowerable = map[string]bool{"What": true, "What's": true, "How": true, "Tell": true, "Do": true, "Could": true, "Can": true,
		"I'm": true, "I'd": true, "Is": true, "Show": true, "In": true, "Any": true, "Give": true, "Please": true, "Help": true}
)

// paraphrase asks the fact's question again as a user would (see the
// paraphrase mix), with some of a greeting, a thank-you, lower case, dropped
// punctuation or a typo. It never returns the stored text itself.
func (f fact) paraphrase(rng *rand.Rand) string {
	dm := &domains[f.d]
	t, alt := f.t, f.altRand()
	switch p := rng.Float64(); {
	case p < paraSameWording:
	case p < paraSameWording+paraSynonyms:
		alt = rng
	default:
		t, alt = (t+1+rng.IntN(len(dm.templates)-1))%len(dm.templates), rng
	}
	s := f.render(alt, dm.templates[t])
	edits := []func(string) string{
		func(s string) string { // greeting
			if first, _, _ := strings.Cut(s, " "); lowerable[first] {
				s = strings.ToLower(s[:1]) + s[1:]
			}
			return prefixes[rng.IntN(len(prefixes))] + s
		},
		func(s string) string { return s + suffixes[rng.IntN(len(suffixes))] },
		strings.ToLower,
		func(s string) string { return strings.TrimRight(s, "?.!") },
		func(s string) string { return typo(rng, s) },
	}
	for i, p := range []float64{0.2, 0.2, 0.15, 0.15, 0.08} {
		if rng.Float64() < p {
			s = edits[i](s)
		}
	}
	if s == f.text {
		s = edits[rng.IntN(2)](s) // a greeting or a thank-you always changes it
	}
	return s
}

// typo swaps two adjacent letters inside one word of five letters or more.
func typo(rng *rand.Rand, s string) string {
	words := strings.Split(s, " ")
	for range 5 {
		i := rng.IntN(len(words))
		w := []byte(words[i])
		if len(w) < 5 || strings.ContainsAny(words[i], "0123456789") {
			continue
		}
		j := 1 + rng.IntN(len(w)-3)
		w[j], w[j+1] = w[j+1], w[j]
		words[i] = string(w)
		break
	}
	return strings.Join(words, " ")
}

// body is the chat request for a question in the fact's scope.
func (f fact) body(question string) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	b, _ := json.Marshal(struct {
		Model       string `json:"model"`
		MaxTokens   int    `json:"max_tokens"`
		Temperature int    `json:"temperature"`
		Messages    []msg  `json:"messages"`
	}{"qwen3-8b", 16, 0, []msg{{"system", systemPrompts[f.system]}, {"user", question}}})
	return b
}

// ---------------------------------------------------------------------------
// Processes

// proc is a child process; done is closed once it has exited and been reaped.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
}

// exited describes how the process ended, or is "" while it runs.
func (p *proc) exited() string {
	select {
	case <-p.done:
		return p.cmd.ProcessState.String()
	default:
		return ""
	}
}

// logExcerpt is the process's log from its first panic or fatal error, else
// its end.
func (p *proc) logExcerpt() string {
	b, _ := os.ReadFile(p.log)
	s := string(b)
	for _, mark := range []string{"panic:", "fatal error:"} {
		if i := strings.Index(s, mark); i >= 0 {
			return strings.TrimSpace(s[i:min(len(s), i+2500)])
		}
	}
	return strings.TrimSpace(s[max(0, len(s)-1500):])
}

// procs are the child processes still running; every exit path stops them.
// Children also get SIGKILL if the benchmark itself dies (Pdeathsig).
type procs struct {
	mu   sync.Mutex
	list []*proc
}

// start runs name with its output in logPath.
func (ps *procs) start(logPath, name string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	defer f.Close() // the child has its own descriptor
	c := exec.Command(name, args...)
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = childAttr()
	c.Env = os.Environ()
	for _, t := range tenants {
		c.Env = append(c.Env, t.env+"="+t.key)
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(name), err)
	}
	p := &proc{name: filepath.Base(name), log: logPath, cmd: c, done: make(chan struct{})}
	go func() { _ = c.Wait(); close(p.done) }()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.list = append(ps.list, p)
	return p, nil
}

// stop kills the given processes (all when none is given) and waits for them.
func (ps *procs) stop(which ...*proc) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(which) == 0 {
		which = ps.list
	}
	for _, p := range which {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	kept := ps.list[:0]
	for _, p := range ps.list {
		if p.exited() == "" {
			kept = append(kept, p)
		}
	}
	ps.list = kept
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// redisModule is the RediSearch module to load: $FRONTDOOR_REDISEARCH_MODULE
// or ../shared/redis-modules beside the repository.
func redisModule() (string, error) {
	if p := os.Getenv("FRONTDOOR_REDISEARCH_MODULE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("FRONTDOOR_REDISEARCH_MODULE: %w", err)
		}
		return filepath.Abs(p)
	}
	p, err := filepath.Abs("../shared/redis-modules/redisearch-2.6.37.so")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the Redis backends need the RediSearch module: set FRONTDOOR_REDISEARCH_MODULE or put it at %s (run from the repository root), or use -backends memory: %w", p, err)
	}
	return p, nil
}

// keyPrefix is the gateways' redis.key_prefix; cache keys live under
// keyPrefix+"c:", vectors in HASHes under keyPrefix+"c:v:".
const keyPrefix = "fdbench:"

// startRedis starts an empty redis-server with the module and waits for PING.
func startRedis(ctx context.Context, p *procs, dir, module string) (int, *proc, *redis.Client, error) {
	port := load.FreePort()
	c, err := p.start(filepath.Join(dir, "redis.log"), "redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loadmodule", module, "--latency-monitor-threshold", "10")
	if err != nil {
		return 0, nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr(port), MaxRetries: -1})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err = rdb.Ping(ctx).Err(); err == nil {
			return port, c, rdb, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = rdb.Close()
			p.stop(c)
			return 0, nil, nil, fmt.Errorf("redis-server on %s: %w\n%s", addr(port), err, c.logExcerpt())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisVectors counts the vector HASHes in Redis (SCAN, so only between phases).
func redisVectors(ctx context.Context, rdb *redis.Client) (int64, error) {
	var n int64
	iter := rdb.Scan(ctx, 0, keyPrefix+"c:v:*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	if err := iter.Err(); err != nil {
		return 0, fmt.Errorf("scan vectors: %w", err)
	}
	return n, nil
}

// gatewayConfig is one replica's config file.
func gatewayConfig(o opts, backend string, port, simPort, redisPort int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\n", addr(port))
	b.WriteString("logging: {level: warn, access_log: false}\n")
	b.WriteString("admin: {allow_cidrs: [127.0.0.1/32]}\n") // /status, read from loopback
	b.WriteString("auth: {required: true}\n")
	b.WriteString("admission: {backend: local}\n")
	b.WriteString("spillover: {enabled: false}\n")
	b.WriteString("tenants:\n")
	for _, t := range tenants {
		fmt.Fprintf(&b, "  - {name: %s, api_keys_env: %s}\n", t.name, t.env)
	}
	b.WriteString("nodes:\n")
	fmt.Fprintf(&b, "  - {name: sim, url: http://%s, models: [qwen3-8b], max_concurrency: 1024}\n", addr(simPort))
	if backend != "memory" {
		fmt.Fprintf(&b, "redis:\n  url: redis://%s/0\n  key_prefix: %q\n", addr(redisPort), keyPrefix)
		if o.redisTimeout != "" {
			fmt.Fprintf(&b, "  timeout: %s\n", o.redisTimeout)
		}
	}
	b.WriteString("cache:\n")
	switch backend {
	case "memory":
		b.WriteString("  backend: memory\n  max_bytes: 4GiB\n") // no eviction at these sizes
	case "redis-local":
		b.WriteString("  backend: redis\n  vector_search: local\n")
	case "redisearch":
		b.WriteString("  backend: redis\n  vector_search: redisearch\n")
	}
	if backend == "redisearch" && (o.index != "" || o.hnswM > 0 || o.efConstruction > 0 || o.efRun > 0) {
		b.WriteString("  redis_index:\n")
		if o.index != "" {
			fmt.Fprintf(&b, "    type: %s\n", o.index)
		}
		for _, kv := range []struct {
			k string
			v int
		}{{"m", o.hnswM}, {"ef_construction", o.efConstruction}, {"ef_runtime", o.efRun}} {
			if kv.v > 0 {
				fmt.Fprintf(&b, "    %s: %d\n", kv.k, kv.v)
			}
		}
	}
	for _, line := range strings.Split(o.cacheYAML, "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  " + line + "\n")
		}
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Load

// request is one chat request of a phase.
type request struct {
	body []byte
	key  string // the tenant's API key
}

// reply is what a request got.
type reply struct {
	status       int // 0: transport error
	cache, entry string
	lat          time.Duration
}

// send posts every request once, from conc clients; request i goes to
// gateway i mod len(urls). It stops early only when ctx is done.
// send sends reqs from conc clients, as fast as they answer, or, with rate
// > 0, request i at start + i/rate (a client that is behind sends at once).
func send(ctx context.Context, urls []string, reqs []request, conc int, noCache bool, label string, rate float64) ([]reply, time.Duration) {
	client := &fasthttp.Client{MaxConnsPerHost: conc, ReadTimeout: time.Minute, WriteTimeout: 10 * time.Second,
		NoDefaultUserAgentHeader: true, MaxIdemponentCallAttempts: 1}
	defer client.CloseIdleConnections()
	out := make([]reply, len(reqs))
	var next, done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stopTicker := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopTicker:
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "    %s: %d/%d after %s\n", label, done.Load(), len(reqs), time.Since(start).Round(time.Second))
			}
		}
	}()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) {
					return
				}
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
				}
				req.Reset()
				req.SetRequestURI(urls[i%len(urls)] + "/v1/chat/completions")
				req.Header.SetMethod(fasthttp.MethodPost)
				req.Header.SetContentType("application/json")
				req.Header.Set("Authorization", "Bearer "+reqs[i].key)
				if noCache {
					req.Header.Set("Cache-Control", "no-cache")
				}
				req.SetBodyRaw(reqs[i].body)
				t0 := time.Now()
				err := client.Do(req, resp)
				r := reply{lat: time.Since(t0)}
				if err == nil {
					r.status = resp.StatusCode()
					r.cache, r.entry = string(resp.Header.Peek("X-Cache")), string(resp.Header.Peek("X-Cache-Entry"))
				}
				out[i] = r
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stopTicker)
	return out, time.Since(start)
}

// vectorCounts reads cache.vector_entries from each gateway's /status.
func vectorCounts(urls []string) ([]int64, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	out := make([]int64, len(urls))
	for i, u := range urls {
		resp, err := c.Get(u + "/status")
		if err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
		var st struct {
			Cache *struct {
				Vectors int64 `json:"vector_entries"`
			} `json:"cache"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("status of %s: %w", u, err)
		case st.Cache == nil:
			return nil, fmt.Errorf("status of %s has no cache section", u)
		}
		out[i] = st.Cache.Vectors
	}
	return out, nil
}

// settle waits until every gateway reports want vector entries, or neither
// their counts nor Redis's key count (rdb, when not nil) changed for quiet,
// or limit has passed, and returns the gateways' counts.
func settle(ctx context.Context, urls []string, rdb *redis.Client, want int64, quiet, limit time.Duration) ([]int64, time.Duration, error) {
	start := time.Now()
	last := ""
	changed := start
	for {
		counts, err := vectorCounts(urls)
		if err == nil && rdb != nil {
			var keys int64
			keys, err = rdb.DBSize(ctx).Result()
			counts = append(counts, keys)
		}
		if err != nil && time.Since(start) > limit {
			return nil, time.Since(start), err
		}
		if err == nil {
			if now := fmt.Sprint(counts); now != last {
				last, changed = now, time.Now()
			}
			if rdb != nil {
				counts = counts[:len(counts)-1]
			}
			if minOf(counts) >= want || time.Since(changed) >= quiet || time.Since(start) > limit {
				return counts, time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, time.Since(start), ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func minOf(v []int64) int64 {
	m := int64(math.MaxInt64)
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

// ---------------------------------------------------------------------------
// Metrics

// point is one Prometheus sample, summed over replicas.
type point struct {
	name   string
	labels map[string]string
	value  float64
}

// snapshot holds every series of the gateways' /metrics, keyed by name and
// sorted labels.
type snapshot map[string]*point

func scrape(urls []string) (snapshot, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	s := snapshot{}
	for _, u := range urls {
		resp, err := c.Get(u + "/metrics")
		if err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", u, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if p, ok := parseSample(line); ok {
				k := seriesKey(p.name, p.labels)
				if q := s[k]; q != nil {
					q.value += p.value
				} else {
					s[k] = &p
				}
			}
		}
	}
	return s, nil
}

// parseSample reads `name{k="v",...} value [timestamp]`.
func parseSample(line string) (point, bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return point{}, false
	}
	p := point{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i > 0 && line[i] == '{' {
		p.name, rest = line[:i], line[i+1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return point{}, false
			}
			k := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			for i := 0; ; i++ {
				if i >= len(rest) {
					return point{}, false
				}
				if rest[i] == '\\' && i+1 < len(rest) { // \\, \" or \n
					i++
					if rest[i] == 'n' {
						v.WriteByte('\n')
					} else {
						v.WriteByte(rest[i])
					}
					continue
				}
				if rest[i] == '"' {
					rest = rest[i+1:]
					break
				}
				v.WriteByte(rest[i])
			}
			p.labels[k] = v.String()
		}
	} else {
		f := strings.Fields(line)
		p.name, rest = f[0], strings.TrimPrefix(line, f[0])
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return point{}, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return point{}, false
	}
	p.value = v
	return p, true
}

func seriesKey(name string, labels map[string]string) string {
	ks := make([]string, 0, len(labels))
	for k, v := range labels {
		ks = append(ks, k+"="+strconv.Quote(v))
	}
	sort.Strings(ks)
	return name + "{" + strings.Join(ks, ",") + "}"
}

// minus is s - before, series by series.
func (s snapshot) minus(before snapshot) snapshot {
	out := snapshot{}
	for k, p := range s {
		q := *p
		if b := before[k]; b != nil {
			q.value -= b.value
		}
		out[k] = &q
	}
	return out
}

// by sums the series called name that carry every label of match, grouped by
// the value of label; ok is false when no such series exists.
func (s snapshot) by(name, label string, match map[string]string) (map[string]float64, bool) {
	out := map[string]float64{}
	ok := false
outer:
	for _, p := range s {
		if p.name != name {
			continue
		}
		for k, v := range match {
			if p.labels[k] != v {
				continue outer
			}
		}
		ok = true
		out[p.labels[label]] += p.value
	}
	return out, ok
}

// bucket is one histogram bucket: n observations in (lo, hi].
type bucket struct{ lo, hi, n float64 }

// buckets reads the histogram name for op, with Prometheus (le, cumulative)
// or VictoriaMetrics (vmrange) buckets, merged over replicas.
func (s snapshot) buckets(name, op string) ([]bucket, bool) {
	var out []bucket
	les := map[float64]float64{}
	for _, p := range s {
		if p.name != name+"_bucket" || p.labels["op"] != op {
			continue
		}
		if le, ok := p.labels["le"]; ok {
			v, err := strconv.ParseFloat(le, 64)
			if err == nil {
				les[v] += p.value
			}
		} else if r, ok := p.labels["vmrange"]; ok {
			lo, hi, _ := strings.Cut(r, "...")
			l, err1 := strconv.ParseFloat(lo, 64)
			h, err2 := strconv.ParseFloat(hi, 64)
			if err1 == nil && err2 == nil {
				out = append(out, bucket{l, h, p.value})
			}
		}
	}
	if len(les) > 0 {
		bounds := make([]float64, 0, len(les))
		for le := range les {
			bounds = append(bounds, le)
		}
		sort.Float64s(bounds)
		prev, cum := 0.0, 0.0
		for _, le := range bounds {
			out = append(out, bucket{prev, le, les[le] - cum})
			prev, cum = le, les[le]
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
	return out, len(out) > 0
}

// quantile interpolates linearly inside the bucket holding the q-quantile;
// in the open last bucket it returns that bucket's lower bound, with over set.
func quantile(bs []bucket, q float64) (v float64, over, ok bool) {
	total := 0.0
	for _, b := range bs {
		total += b.n
	}
	if total <= 0 {
		return 0, false, false
	}
	target, cum := q*total, 0.0
	for _, b := range bs {
		if b.n > 0 && cum+b.n >= target {
			if math.IsInf(b.hi, 1) {
				return b.lo, true, true
			}
			return b.lo + (target-cum)/b.n*(b.hi-b.lo), false, true
		}
		cum += b.n
	}
	return bs[len(bs)-1].hi, false, true
}

// ---------------------------------------------------------------------------
// Runs

// result is one backend at one size.
type result struct {
	backend        string
	fill, replicas int
	err            error

	fillRPS, storeRPS float64
	fillSettle        time.Duration
	entries           []int64 // vector entries per replica (GET /status) when the queries began
	redisEntries      int64   // vector HASHes in Redis then; -1 for memory
	storeSettle       time.Duration

	queries, semantic, exact, wrong int
	storeErrs, queryErrs            int // client-visible: non-200 or no answer
	firstErr                        string
	reqP50, reqP99                  time.Duration
	queryRPS                        float64

	// Metrics: before the queries (fill and stores) and over the query phase.
	mStore, mQuery snapshot
	crashes        []string // processes that died during the run
	redis          string   // Redis's own view of the query phase
}

// redisStats is what Redis says of its own work: CPU seconds and, by
// command, calls and microseconds.
type redisStats struct {
	cpu, forks, forkUsec float64
	calls                map[string][2]float64
}

func redisUsage(ctx context.Context, rdb *redis.Client) redisStats {
	st := redisStats{calls: map[string][2]float64{}}
	if rdb == nil {
		return st
	}
	info, err := rdb.Info(ctx, "cpu", "stats", "commandstats").Result()
	if err != nil {
		return st
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			st.cpu += f
		case k == "total_forks":
			st.forks, _ = strconv.ParseFloat(v, 64)
		case k == "latest_fork_usec":
			st.forkUsec, _ = strconv.ParseFloat(v, 64)
		case strings.HasPrefix(k, "cmdstat_"):
			var calls, usec float64
			for _, kv := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(kv, "=")
				switch name {
				case "calls":
					calls, _ = strconv.ParseFloat(val, 64)
				case "usec":
					usec, _ = strconv.ParseFloat(val, 64)
				}
			}
			st.calls[strings.TrimPrefix(k, "cmdstat_")] = [2]float64{calls, usec}
		}
	}
	return st
}

// since describes the work between before and st over d: Redis's share of
// a core, and the commands that took most of its time.
func (st redisStats) since(before redisStats, d time.Duration) string {
	if len(st.calls) == 0 {
		return ""
	}
	type cmd struct {
		name        string
		calls, usec float64
	}
	var cmds []cmd
	var total float64
	for name, cu := range st.calls {
		b := before.calls[name]
		c := cmd{strings.ToLower(name), cu[0] - b[0], cu[1] - b[1]}
		if c.calls > 0 {
			cmds = append(cmds, c)
			total += c.usec
		}
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].usec > cmds[j].usec })
	out := fmt.Sprintf("Redis used %.0f%% of a core (commands %.0f%%)", 100*(st.cpu-before.cpu)/d.Seconds(), 100*total/1e6/d.Seconds())
	for _, c := range cmds[:min(4, len(cmds))] {
		out += fmt.Sprintf("; %s %.0f calls, %.0f µs each", c.name, c.calls, c.usec/c.calls)
	}
	if n := st.forks - before.forks; n > 0 {
		out += fmt.Sprintf("; %.0f forks (the last stopped Redis for %.0f ms)", n, st.forkUsec/1000)
	}
	return out
}

// env is what every run shares.
type env struct {
	dir, bin, module string
	simPort          int
	procs            *procs
	stored, distract []fact
	storeReqs        []request
	queryReqs        []request
	queryOf          []int // stored index each query paraphrases
}

func run(ctx context.Context, o opts) error {
	e := &env{procs: &procs{}}
	needRedis := false
	for _, b := range o.backends {
		needRedis = needRedis || b != "memory"
	}
	if needRedis {
		var err error
		if e.module, err = redisModule(); err != nil {
			return err
		}
		if _, err := exec.LookPath("redis-server"); err != nil {
			return fmt.Errorf("redis-server is not installed (apt-get install -y redis-server): %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "fd-rediscache")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e.dir, e.bin = dir, filepath.Join(dir, "bin")
	fmt.Fprintln(os.Stderr, "building frontdoor and gpusim")
	if err := load.Build(e.bin, "frontdoor", "gpusim"); err != nil {
		return err
	}
	defer e.procs.stop()
	e.simPort = load.FreePort()
	sim, err := e.procs.start(filepath.Join(dir, "gpusim.log"), filepath.Join(e.bin, "gpusim"), "--listen", addr(e.simPort),
		"--model", "qwen3-8b", "--ttft", "0", "--itl", "0", "--max-num-seqs", "512", "--output-tokens", "16")
	if err != nil {
		return err
	}
	if err := load.WaitUp(fmt.Sprintf("http://%s/health", addr(e.simPort))); err != nil {
		return fmt.Errorf("gpusim: %w\n%s", err, sim.logExcerpt())
	}

	maxFill := 0
	for _, s := range o.sizes {
		maxFill = max(maxFill, s)
	}
	facts, err := corpus(o.seed, o.stores+maxFill)
	if err != nil {
		return err
	}
	e.stored, e.distract = facts[:o.stores], facts[o.stores:]
	for _, f := range e.stored {
		e.storeReqs = append(e.storeReqs, request{f.body(f.text), tenants[f.tenant].key})
	}
	// Each query paraphrases a stored question: every one once (shuffled)
	// before any is asked again.
	qrng := rand.New(rand.NewPCG(o.seed, 0x9e7a))
	for len(e.queryOf) < o.queries {
		for _, k := range qrng.Perm(o.stores) {
			if len(e.queryOf) == o.queries {
				break
			}
			f := e.stored[k]
			e.queryOf = append(e.queryOf, k)
			e.queryReqs = append(e.queryReqs, request{f.body(f.paraphrase(qrng)), tenants[f.tenant].key})
		}
	}

	var results []*result
	for _, size := range o.sizes {
		for _, backend := range o.backends {
			r := runOne(ctx, o, e, backend, size)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if r.err != nil {
				fmt.Fprintf(os.Stderr, "  %s, fill %d: %v\n", backend, size, r.err)
			}
			results = append(results, r)
		}
	}
	report(o, e, results)
	return nil
}

// runOne measures one backend at one fill on fresh processes.
func runOne(ctx context.Context, o opts, e *env, backend string, fill int) *result {
	r := &result{backend: backend, fill: fill, replicas: o.replicas}
	if backend == "memory" {
		r.replicas = 1
	}
	tag := fmt.Sprintf("%s, fill %d", backend, fill)
	fmt.Fprintf(os.Stderr, "%s: %d replica(s)\n", tag, r.replicas)
	dir := filepath.Join(e.dir, fmt.Sprintf("%s-%d", backend, fill))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.err = err
		return r
	}
	var started []*proc
	defer func() { e.procs.stop(started...) }()
	// A replica or Redis that died explains most failures: say so.
	defer func() {
		for _, p := range started {
			if how := p.exited(); how != "" {
				excerpt := p.logExcerpt()
				fmt.Fprintf(os.Stderr, "  %s exited during the run (%s); its log:\n%s\n", p.name, how, excerpt)
				r.crashes = append(r.crashes, fmt.Sprintf("%s exited during the run (%s): %s", p.name, how, firstLine(excerpt)))
			}
		}
	}()
	redisPort := 0
	var rdb *redis.Client
	if backend != "memory" {
		port, c, client, err := startRedis(ctx, e.procs, dir, e.module)
		if err != nil {
			r.err = err
			return r
		}
		defer client.Close()
		redisPort, rdb, started = port, client, append(started, c)
	}
	var urls []string
	for i := range r.replicas {
		port := load.FreePort()
		cfg := filepath.Join(dir, fmt.Sprintf("frontdoor-%d.yaml", i))
		if err := os.WriteFile(cfg, []byte(gatewayConfig(o, backend, port, e.simPort, redisPort)), 0o600); err != nil {
			r.err = err
			return r
		}
		c, err := e.procs.start(filepath.Join(dir, fmt.Sprintf("frontdoor-%d.log", i)), filepath.Join(e.bin, "frontdoor"), "serve", "--config", cfg)
		if err != nil {
			r.err = err
			return r
		}
		c.name = fmt.Sprintf("frontdoor %d", i)
		started = append(started, c)
		url := "http://" + addr(port)
		if err := load.WaitUp(url + "/readyz"); err != nil {
			r.err = fmt.Errorf("frontdoor %d: %w\n%s", i, err, c.logExcerpt())
			return r
		}
		urls = append(urls, url)
	}

	if fill > 0 {
		// The fill is set-up, not the measured load: it goes in chunks that
		// the write-back queues can hold, each settled before the next, so
		// that it drops nothing.
		const chunk = 5000
		var counts []int64
		var waited, sent time.Duration
		for at := 0; at < fill; at += chunk {
			part := e.distract[at:min(at+chunk, fill)]
			reqs := make([]request, len(part))
			for i, f := range part {
				reqs[i] = request{f.body(f.text), tenants[f.tenant].key}
			}
			replies, d := send(ctx, urls, reqs, o.conc, true, "fill", 0)
			sent += d
			errs, first := countErrors(replies)
			r.storeErrs += errs
			if r.firstErr == "" {
				r.firstErr = first
			}
			var w time.Duration
			var err error
			counts, w, err = settle(ctx, urls, rdb, int64(at+len(part)), o.settleQuiet, o.settleMax)
			if err != nil {
				r.err = fmt.Errorf("settle after fill: %w", err)
				return r
			}
			waited += w
		}
		r.fillRPS = float64(fill) / sent.Seconds()
		r.fillSettle = waited
		fmt.Fprintf(os.Stderr, "  fill: %d stores in %s (%.0f/s) in chunks of %d, %d errors; settled after %s at %v vector entries\n",
			fill, sent.Round(time.Millisecond), r.fillRPS, chunk, r.storeErrs, waited.Round(100*time.Millisecond), counts)
	}

	replies, d := send(ctx, urls, e.storeReqs, o.conc, true, "stores", 0)
	if ctx.Err() != nil {
		return r
	}
	errs, first := countErrors(replies)
	r.storeErrs += errs
	if r.firstErr == "" {
		r.firstErr = first
	}
	r.storeRPS = float64(len(replies)) / d.Seconds()
	entryOf := make([]string, len(replies))
	for i, rep := range replies {
		entryOf[i] = rep.entry
	}
	counts, waited, err := settle(ctx, urls, rdb, int64(fill+len(e.stored)), o.settleQuiet, o.settleMax)
	if err != nil {
		r.err = fmt.Errorf("settle after stores: %w", err)
		return r
	}
	r.entries, r.storeSettle, r.redisEntries = counts, waited, -1
	if rdb != nil {
		if r.redisEntries, err = redisVectors(ctx, rdb); err != nil {
			r.err = err
			return r
		}
	}
	inRedis := ""
	if r.redisEntries >= 0 {
		inRedis = fmt.Sprintf(" (in Redis: %d)", r.redisEntries)
	}
	fmt.Fprintf(os.Stderr, "  stores: %d in %s (%.0f/s), %d errors; settled after %s at %v vector entries%s\n",
		len(replies), d.Round(time.Millisecond), r.storeRPS, errs, waited.Round(100*time.Millisecond), counts, inRedis)
	before, err := scrape(urls)
	if err != nil {
		r.err = err
		return r
	}
	r.mStore = before
	redisBefore := redisUsage(ctx, rdb)

	replies, d = send(ctx, urls, e.queryReqs, o.conc, false, "queries", o.queryRPS)
	r.redis = redisUsage(ctx, rdb).since(redisBefore, d)
	if rdb != nil {
		// Events in which Redis itself was busy for 10 ms or more.
		if ev, err := rdb.Do(ctx, "LATENCY", "LATEST").Slice(); err == nil && len(ev) > 0 {
			var parts []string
			for _, e := range ev {
				if f, ok := e.([]any); ok && len(f) >= 4 {
					parts = append(parts, fmt.Sprintf("%v (latest %v ms, max %v ms)", f[0], f[2], f[3]))
				}
			}
			r.redis += "; Redis latency events: " + strings.Join(parts, ", ")
		}
	}
	if ctx.Err() != nil {
		return r
	}
	r.queries = len(replies)
	r.queryRPS = float64(len(replies)) / d.Seconds()
	r.queryErrs, first = countErrors(replies)
	if r.firstErr == "" {
		r.firstErr = first
	}
	lats := make([]time.Duration, 0, len(replies))
	for i, rep := range replies {
		lats = append(lats, rep.lat)
		if rep.status != 200 {
			continue
		}
		switch rep.cache {
		case "hit-semantic":
			r.semantic++
		case "hit-exact":
			r.exact++
		default:
			continue
		}
		if rep.entry != entryOf[e.queryOf[i]] {
			r.wrong++
		}
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	r.reqP50, r.reqP99 = lats[len(lats)/2], lats[min(len(lats)-1, len(lats)*99/100)]
	// Let the misses' write-back finish, so that its errors count here.
	if _, _, err := settle(ctx, urls, rdb, int64(fill+len(e.stored)+len(replies)), o.settleQuiet, 30*time.Second); err != nil {
		r.err = fmt.Errorf("settle after queries: %w", err)
		return r
	}
	after, err := scrape(urls)
	if err != nil {
		r.err = err
		return r
	}
	r.mQuery = after.minus(before)
	fmt.Fprintf(os.Stderr, "  queries: %d in %s (%.0f/s), %d errors; hit rate %.1f%% (%d semantic, %d exact, %d on another entry); p50 %s p99 %s\n",
		r.queries, d.Round(time.Millisecond), r.queryRPS, r.queryErrs, 100*float64(r.semantic+r.exact)/float64(r.queries),
		r.semantic, r.exact, r.wrong, fmtDur(r.reqP50), fmtDur(r.reqP99))
	return r
}

// countErrors counts replies that are not 200 and describes the first.
func countErrors(rs []reply) (int, string) {
	n, first := 0, ""
	for _, r := range rs {
		if r.status == 200 {
			continue
		}
		n++
		if first == "" {
			first = fmt.Sprintf("status %d", r.status)
			if r.status == 0 {
				first = "no answer (transport error or timeout)"
			}
		}
	}
	return n, first
}

// ---------------------------------------------------------------------------
// Report

func report(o opts, e *env, rs []*result) {
	fmt.Printf("command: %s\n\n", commandLine())
	setup := "one frontdoor"
	if e.module != "" {
		ver := "redis-server"
		if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
			if f := strings.Fields(string(out)); len(f) >= 3 {
				ver += " " + strings.TrimPrefix(f[2], "v=")
			}
		}
		setup = fmt.Sprintf("memory: one frontdoor; Redis backends: %d frontdoor replicas on one %s with %s", o.replicas, ver, filepath.Base(e.module))
	}
	fmt.Printf("Each backend and size on fresh processes (%s), one gpusim (ttft 0, itl 0, 16 tokens), %d clients round-robin over "+
		"the replicas, %d CPUs. Corpus (seed %d): %d stored questions in %d scopes (%d tenants × %d system prompts), sent with "+
		"Cache-Control: no-cache after the distractor fill, then %d paraphrases of them (%.0f%% same wording with a greeting, "+
		"thanks, case, punctuation or typo change; %.0f%% synonyms changed; %.0f%% rephrased). Hit rate and latencies are of the "+
		"query phase; store rps is of the stored questions. %s\n\n",
		setup, o.conc, runtime.NumCPU(), o.seed, len(e.stored), len(tenants)*len(systemPrompts), len(tenants), len(systemPrompts),
		len(e.queryReqs), 100*paraSameWording, 100*paraSynonyms, 100*(1-paraSameWording-paraSynonyms), pacing(o.queryRPS))
	fmt.Println("| backend | replicas | entries at query time | store rps | hit rate | hits on another entry | client errors (stores / queries) | cache errors (stores / queries) | breaker openings (stores / queries) | dropped writes (stores / queries) | search p50 / p99 | get p50 / p99 | request p50 / p99 |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var notes []string
	for _, r := range rs {
		if r.err != nil && r.mQuery == nil {
			fmt.Printf("| %s | %d | fill %d: failed | | | | | | | | | | |\n", r.backend, r.replicas, r.fill)
			notes = append(notes, fmt.Sprintf("%s, fill %d: %s", r.backend, r.fill, strings.Join(append([]string{firstLine(r.err.Error())}, r.crashes...), "; ")))
			continue
		}
		hits := r.semantic + r.exact
		errOps := func(s snapshot) (string, map[string]float64) {
			m, ok := s.by("frontdoor_cache_errors_total", "op", nil)
			if !ok {
				return "n/a", nil
			}
			return fmtCount(sumOf(m)), m
		}
		eS, eSOps := errOps(r.mStore)
		eQ, eQOps := errOps(r.mQuery)
		open := map[string]string{"to": "open"}
		bS, bSPaths := counter(r.mStore, "frontdoor_cache_breaker_transitions_total", "path", open)
		bQ, bQPaths := counter(r.mQuery, "frontdoor_cache_breaker_transitions_total", "path", open)
		dS, dSReasons := counter(r.mStore, "frontdoor_cache_writes_dropped_total", "reason", nil)
		dQ, dQReasons := counter(r.mQuery, "frontdoor_cache_writes_dropped_total", "reason", nil)
		fmt.Printf("| %s | %d | %s | %.0f | **%.1f%%** | %.1f%% | %d / %d | %s / %s | %s / %s | %s / %s | %s | %s | %s / %s |\n",
			r.backend, r.replicas, fmtEntries(r.entries, r.redisEntries), r.storeRPS, 100*float64(hits)/float64(r.queries),
			100*float64(r.wrong)/float64(max(1, hits)), r.storeErrs, r.queryErrs, eS, eQ, bS, bQ, dS, dQ,
			histCell(r.mQuery, "search"), histCell(r.mQuery, "get"), fmtDur(r.reqP50), fmtDur(r.reqP99))
		var parts []string
		if r.fill > 0 {
			parts = append(parts, fmt.Sprintf("fill of %d at %.0f req/s settled in %s", r.fill, r.fillRPS, r.fillSettle.Round(100*time.Millisecond)))
		}
		parts = append(parts, fmt.Sprintf("stores settled in %s", r.storeSettle.Round(100*time.Millisecond)),
			fmt.Sprintf("queries at %.0f req/s: %d semantic and %d exact hits, %d on another entry than the paraphrased one", r.queryRPS, r.semantic, r.exact, r.wrong))
		for _, d := range []struct {
			what string
			m    map[string]float64
		}{{"cache errors by op, stores", eSOps}, {"cache errors by op, queries", eQOps}, {"breaker openings by path, stores", bSPaths},
			{"breaker openings by path, queries", bQPaths}, {"dropped writes by reason, stores", dSReasons}, {"dropped writes by reason, queries", dQReasons}} {
			if s := nonZero(d.m); s != "" {
				parts = append(parts, d.what+": "+s)
			}
		}
		if r.redis != "" {
			parts = append(parts, "during the queries, "+r.redis)
		}
		if r.storeErrs+r.queryErrs > 0 {
			parts = append(parts, "first client error: "+r.firstErr)
		}
		if r.err != nil {
			parts = append(parts, "error: "+firstLine(r.err.Error()))
		}
		parts = append(parts, r.crashes...)
		notes = append(notes, fmt.Sprintf("%s, fill %d: %s", r.backend, r.fill, strings.Join(parts, "; ")))
	}
	fmt.Println()
	for _, n := range notes {
		fmt.Println("- " + n)
	}
	fmt.Println("\nentries at query time: cache.vector_entries of each replica's GET /status (a range when they differ), and the vector " +
		"HASHes counted in Redis when that differs. hit rate: hits (X-Cache hit-semantic or hit-exact) over queries; hits on another entry: hits whose X-Cache-Entry is not the " +
		"entry stored for the paraphrased question (a distractor or a near-duplicate answered instead). Cache errors, breaker openings and " +
		"dropped writes are frontdoor_cache_errors_total, frontdoor_cache_breaker_transitions_total{to=\"open\"} and " +
		"frontdoor_cache_writes_dropped_total summed over the replicas: before the queries (fill, stores and their write-back) / during the " +
		"queries and their write-back; n/a: the gateway has no such series. search and get are frontdoor_cache_lookup_seconds (the " +
		"gateway's store calls) over the query phase, interpolated inside buckets; request is the client's latency of the queries.")
}

func counter(s snapshot, name, label string, match map[string]string) (string, map[string]float64) {
	m, ok := s.by(name, label, match)
	if !ok {
		return "n/a", nil
	}
	return fmtCount(sumOf(m)), m
}

func histCell(s snapshot, op string) string {
	bs, ok := s.buckets("frontdoor_cache_lookup_seconds", op)
	if !ok {
		return "n/a"
	}
	q := func(p float64) string {
		v, over, ok := quantile(bs, p)
		if !ok {
			return "–"
		}
		if over {
			return "> " + fmtDur(time.Duration(v*1e9))
		}
		return fmtDur(time.Duration(v * 1e9))
	}
	return q(0.5) + " / " + q(0.99)
}

func sumOf(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

func nonZero(m map[string]float64) string {
	var parts []string
	for k, v := range m {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s %s", k, fmtCount(v)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func fmtCount(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fmtEntries(c []int64, inRedis int64) string {
	if len(c) == 0 {
		return "?"
	}
	lo, hi := c[0], c[0]
	for _, v := range c {
		lo, hi = min(lo, v), max(hi, v)
	}
	s := strconv.FormatInt(lo, 10)
	if lo != hi {
		s = fmt.Sprintf("%d–%d", lo, hi)
	}
	if inRedis >= 0 && inRedis != hi {
		s += fmt.Sprintf(" (in Redis: %d)", inRedis)
	}
	return s
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// commandLine is the command as typed, shell-quoted where needed.
func commandLine() string {
	parts := []string{"go run ./bench/rediscache"}
	for _, a := range os.Args[1:] {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$`\\|&;<>(){}*?#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func pacing(rps float64) string {
	if rps > 0 {
		return fmt.Sprintf("Queries are paced at %.0f per second.", rps)
	}
	return "Queries are sent as fast as the clients get answers."
}
