package router

import "frontdoor/router/admin"

// AdminToken reads the admin token from the variable admin.token_env
// names: "" when it is unset or empty, an error when its value is a
// placeholder or under about 128 bits (admin.Token). serve, reload and
// check-config all refuse such a token.
func AdminToken(c Admin) (string, error) { return admin.Token(c.TokenEnv) }
