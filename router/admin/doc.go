// Package admin is the gateway's operator surface: /admin/* (the cache's
// entries, purges, imports, warm-ups and hot list; node drain; reload),
// /status, /dashboard (with its history, kept here: history.go) and
// /debug/pprof/, all behind the admin guard (the admin token or a session
// signed from it by /admin/login, the admin listener with its browser
// checks, or admin.allow_cidrs). It reaches the gateway only through the Gateway
// interface, which router implements; it never imports router.
package admin
