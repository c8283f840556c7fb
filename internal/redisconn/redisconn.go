// Package redisconn holds the shared redis: config section and builds the
// one go-redis client that the cache and admission share.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"frontdoor/internal/units"
)

// Config is the top-level redis: section.
type Config struct {
	URL         string         `yaml:"url"`         // redis://host:port/db (standalone)
	Addrs       []string       `yaml:"addrs"`       // or a cluster / sentinel address list
	MasterName  string         `yaml:"master_name"` // sentinel master
	PasswordEnv string         `yaml:"password_env"`
	KeyPrefix   string         `yaml:"key_prefix"`
	Timeout     units.Duration `yaml:"timeout"`
	PoolSize    int            `yaml:"pool_size"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{URL: "redis://127.0.0.1:6379/0", KeyPrefix: "fd:", Timeout: units.Duration(50 * time.Millisecond)}
}

// Validate checks the section.
func (c *Config) Validate() error {
	var errs []error
	if c.URL == "" && len(c.Addrs) == 0 {
		errs = append(errs, errors.New("url: set url or addrs"))
	}
	if c.URL != "" {
		if _, err := redis.ParseURL(c.URL); err != nil {
			errs = append(errs, fmt.Errorf("url: %w", err))
		}
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("timeout: must be > 0"))
	}
	return errors.Join(errs...)
}

func init() {
	// go-redis logs every failed dial; the gateway counts and logs store
	// errors itself.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// New builds the client: standalone from url, or a cluster/sentinel client
// from addrs.
func New(c Config, password string) (redis.UniversalClient, error) {
	t := c.Timeout.D()
	if len(c.Addrs) > 0 {
		return redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: c.Addrs, MasterName: c.MasterName, Password: password,
			DialTimeout: 4 * t, ReadTimeout: t, WriteTimeout: t, PoolSize: c.PoolSize,
			MaxRetries: -1, DialerRetries: 1,
		}), nil
	}
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if password != "" {
		opt.Password = password
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 4*t, t, t
	opt.MaxRetries = -1 // a slow Redis must not slow requests: fail fast, fail open
	opt.DialerRetries = 1
	if c.PoolSize > 0 {
		opt.PoolSize = c.PoolSize
	}
	return redis.NewClient(opt), nil
}

// Password is the password c names: the value of its password_env, or "".
func Password(c Config) string {
	if c.PasswordEnv == "" {
		return ""
	}
	return os.Getenv(c.PasswordEnv)
}
