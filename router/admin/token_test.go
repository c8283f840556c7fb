package admin

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

// Token refuses what a guesser would try early (a run, a sequence, a
// keyboard or product word, anything short of about 128 bits) with the
// command that makes a good one, and takes what openssl rand makes.
func TestTokenStrength(t *testing.T) {
	for _, tok := range []string{
		"aaaaaaaaaaaaaaaa", "Password12345678", "frontdoor-admin-token", "0123456789abcdef0123456789abcdef",
		"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", "fd-test-admin-4f9c2a7e1b", "9f86d081884c7d65",
		"QwertyQwertyQwertyQwerty1!", "Tr0ub4dor&3", strings.Repeat("ab12", 16), "mysecretadmintoken2024!!",
		"0000000000000000000000000000000000000000000000000000000000000000", "zyxwvutsrqponmlkjihgfedcba9876543210",
	} {
		t.Setenv("FD_TOKEN_STRENGTH", tok)
		_, err := Token("FD_TOKEN_STRENGTH")
		if err == nil || !strings.Contains(err.Error(), "environment variable FD_TOKEN_STRENGTH") ||
			!strings.Contains(err.Error(), "generate one with: openssl rand -hex 32") {
			t.Errorf("token %q: %v", tok, err)
			continue
		}
		if strings.Contains(err.Error(), tok) && !strings.Contains(err.Error(), "placeholder") {
			t.Errorf("the refusal of a weak token shows the token: %v", err)
		}
	}
	good := []string{
		"daceaf44dfc4febfd23efeadca6e4d359fcf71775f604788821021c15762ab58", // openssl rand -hex 32
		"yhYW3XQzzew0c/p7ffVaiCCm0DT3v7YaglObAURdusU=",                     // openssl rand -base64 32
		"9f86d081884c7d659a2feaa0c55ad015",                                 // 16 random bytes in hex
	}
	for range 200 {
		var b [32]byte
		_, _ = rand.Read(b[:])
		good = append(good, hex.EncodeToString(b[:]), base64.StdEncoding.EncodeToString(b[:]), base64.RawURLEncoding.EncodeToString(b[:]),
			hex.EncodeToString(b[:16]))
	}
	for _, tok := range good {
		t.Setenv("FD_TOKEN_STRENGTH", tok)
		if got, err := Token("FD_TOKEN_STRENGTH"); err != nil || got != tok {
			t.Errorf("token %q: %q, %v", tok, got, err)
		}
	}
}
