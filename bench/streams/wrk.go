package main

// The throughput part (-wrk): wrk against a gpusim that answers at once.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"frontdoor/bench/internal/load"
)

// wrkPart measures throughput at o.conc connections with wrk against a
// gpusim that answers at once.
func wrkPart(o opts, bin string) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("-wrk: wrk is not installed (apt-get install wrk): %w", err)
	}
	e, ts, err := setup(o, bin, 4096, "--ttft", "0", "--itl", "0", "--output-tokens", "16")
	defer e.close()
	if err != nil {
		return err
	}
	// net/http's bare proxy fails some wrk connections with read errors
	// at this rate; it is measured with the slow streams only.
	ts = slices.DeleteFunc(o.selected(ts), func(t target) bool { return t.name == "bare proxy, net/http" })
	type column struct {
		t      target
		name   string
		unique bool
	}
	var cols []column
	for _, t := range ts {
		if t.unique {
			pre := strings.TrimSuffix(t.name, "frontdoor, default")
			cols = append(cols, column{t, pre + "frontdoor default, unique prompts", true}, column{t, pre + "frontdoor default, repeated prompt", false})
		} else {
			cols = append(cols, column{t, t.name, false})
		}
	}
	fmt.Printf("wrk -t1 -c%d -d%s, gpusim --ttft 0 --itl 0 --output-tokens 16; %d alternating rounds; medians (requests/s, ratio to nginx + Lua)\n\n", o.conc, o.wrkDur, o.rounds)
	head, sep := "| | ", "|---|"
	for _, c := range cols {
		head += c.name + " | "
		sep += "---|"
	}
	fmt.Println(strings.TrimSpace(head))
	fmt.Println(sep)
	// The proxy's user and system CPU per request, medians, for the table
	// after the throughput one.
	cpuRows := []string{}
	runs := 0 // numbers the runs, so a prompt is unique over all of them
	for _, stream := range []bool{false, true} {
		rates := make([][]float64, len(cols))
		users, syss := make([][]float64, len(cols)), make([][]float64, len(cols))
		for r := 0; r < o.rounds; r++ {
			for i, c := range cols {
				script := filepath.Join(bin, fmt.Sprintf("wrk-%v-%v.lua", stream, c.unique))
				runs++
				if err := os.WriteFile(script, []byte(wrkScript(stream, c.unique, runs)), 0o600); err != nil {
					return err
				}
				u0, s0, err := load.CPUTimes(c.t.pid)
				if err != nil {
					return err
				}
				res, err := load.Wrk(script, c.t.url, o.conc, o.wrkDur)
				if err != nil {
					return fmt.Errorf("wrk %s: %w", c.name, err)
				}
				u1, s1, err := load.CPUTimes(c.t.pid)
				if err != nil {
					return err
				}
				rates[i] = append(rates[i], res.Rate)
				users[i] = append(users[i], load.Micros(u1-u0)/float64(res.Requests))
				syss[i] = append(syss[i], load.Micros(s1-s0)/float64(res.Requests))
			}
		}
		cpuRow := "| non-streaming | "
		if stream {
			cpuRow = "| streaming | "
		}
		for i := range cols {
			u, s := load.MedianOf(users[i]), load.MedianOf(syss[i])
			cpuRow += fmt.Sprintf("%.0f + %.0f = %.0f µs | ", u, s, u+s)
		}
		cpuRows = append(cpuRows, strings.TrimSpace(cpuRow))
		ngx := 0.0
		for i, c := range cols {
			if c.name == "nginx + Lua" {
				ngx = load.MedianOf(rates[i])
			}
		}
		row := "| non-streaming | "
		if stream {
			row = "| streaming | "
		}
		for i := range cols {
			m := load.MedianOf(rates[i])
			if ngx > 0 {
				row += fmt.Sprintf("%.1fk (**%.2f×**) | ", m/1e3, m/ngx)
			} else {
				row += fmt.Sprintf("%.1fk | ", m/1e3)
			}
		}
		fmt.Println(strings.TrimSpace(row))
	}
	fmt.Println("\nCPU per request of each target's process (user + system, from /proc; for direct, gpusim's own), medians over the same rounds:")
	fmt.Println()
	fmt.Println(strings.TrimSpace(head))
	fmt.Println(sep)
	for _, r := range cpuRows {
		fmt.Println(r)
	}
	fmt.Println()
	return nil
}

// wrkScript is a wrk Lua script posting a chat request; unique gives each
// request its own prompt (the run's number and a counter), so a cache
// misses, also in later runs against the same frontdoor.
func wrkScript(stream, unique bool, run int) string {
	s := ""
	if stream {
		s = `,"stream":true`
	}
	pre := `{"model":"qwen3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"`
	post := `"}],"temperature":0.7,"max_tokens":16` + s + `}`
	lua := "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
	if !unique {
		return lua + "wrk.body = " + strconv.Quote(pre+"What is the capital of France? Answer in one word."+post) + "\n"
	}
	return lua + "local n = 0\nrequest = function()\n  n = n + 1\n  return wrk.format(nil, nil, nil, " +
		strconv.Quote(fmt.Sprintf("%sOrder %d-", pre, run)) + " .. n .. " + strconv.Quote(": what is the capital of France? Answer in one word."+post) + ")\nend\n"
}
