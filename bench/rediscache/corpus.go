package main

// The corpus: generated questions, their paraphrases and the chat requests
// that carry them.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

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
