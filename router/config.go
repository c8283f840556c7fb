package router

import "frontdoor/router/config"

// The configuration lives in router/config; these are its aliases and forwards.
type (
	Config          = config.Config
	ConfigError     = config.ConfigError
	EnvRef          = config.EnvRef
	Limits          = config.Limits
	Server          = config.Server
	Timeouts        = config.Timeouts
	Shutdown        = config.Shutdown
	Admin           = config.Admin
	Logging         = config.Logging
	GlobalLimits    = config.GlobalLimits
	Admission       = config.Admission
	Auth            = config.Auth
	Tenant          = config.Tenant
	Spillover       = config.Spillover
	SpillPrice      = config.SpillPrice
	ResponsesConfig = config.ResponsesConfig
	Warm            = config.Warm
	Passthrough     = config.Passthrough
)

func DefaultConfig() Config             { return config.DefaultConfig() }
func Load(path string) (Config, error)  { return config.Load(path) }
func Parse(data []byte) (Config, error) { return config.Parse(data) }
