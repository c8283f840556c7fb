// Package config is the gateway's configuration: the types of the YAML
// file (Config and one type per section), the default of every key
// (DefaultConfig), reading a file (Load, Parse: unknown keys are errors,
// removed keys say what replaced them) and its validation. Each section
// checks itself in its Validate method, keys relative to the section;
// Config.Problems gathers them under their YAML paths and checks what spans
// sections (the listen addresses, redis when something uses it, names used
// twice, a node on the gateway's own address, the model names that meet at
// run time).
//
// config.go holds the types, the defaults, Load and Parse; validate.go the
// validation of each section and Problems; listen.go the listen addresses
// (their syntax, and a static node that would be the gateway itself).
// Package router aliases every type here (router.Config is Config).
package config
