// A login handler rate limited with pklimit (pgx v4, Debian's
// golang-github-jackc-pgx-v4-dev), built offline from Debian's packages:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$(mktemp -d) go build -o login main.go
//
// Reads attempts from stdin, one "user tenant address password" per line (a
// tenant of "-" means no tenant), and prints one line per attempt:
//
//	alice acme 10.0.0.1 wrong -> 401 remaining=4
//	alice acme 10.0.0.1 wrong -> 429 retry_after=900
//	alice acme 10.0.0.1 s3cret -> 200
//
// Two limits guard a login, checked and recorded together in one
// pklimit_check_all call: 5 attempts per account per 15 minutes, and 8 per
// source address per hour (credential stuffing tries many accounts from one
// address).
//
// The connection comes from the usual libpq environment (PGHOST, PGPORT,
// PGDATABASE, PGUSER, ...) or from the DATABASE_URL environment variable.
package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgconn/stmtcache"
	"github.com/jackc/pgx/v4"
)

const (
	accountLimit  = 5
	accountWindow = "15 minutes"
	addressLimit  = 8
	addressWindow = "1 hour"
	salt          = "pklimit-example"
)

// fakeHash is deliberately slow, as a password hash should be (iterated
// HMAC-SHA256; use bcrypt, scrypt or argon2 in a real application).
func fakeHash(password string) []byte {
	sum := []byte(salt)
	for i := 0; i < 10000; i++ {
		mac := hmac.New(sha256.New, []byte(password))
		mac.Write(sum)
		sum = mac.Sum(nil)
	}
	return sum
}

// A fake user table: user -> password hash.
var users = map[string][]byte{
	"alice": fakeHash("s3cret"),
	"bob":   fakeHash("hunter2"),
}

// login handles one request and returns its HTTP status and headers.
func login(ctx context.Context, conn *pgx.Conn, user, tenant, address, password string) (int, map[string]string, error) {
	headers := map[string]string{}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer tx.Rollback(ctx) // a no-op after Commit

	// The tenant for this transaction only: set_config(..., true) is
	// SET LOCAL, with the tenant as a bind parameter. It ends with the
	// transaction, so a pooled server connection never carries it over.
	if _, err := tx.Exec(ctx, "SELECT set_config('platformkit.tenant', $1, true)", tenant); err != nil {
		return 0, nil, err
	}
	// Count the attempt BEFORE the expensive hash: both limits in one call.
	var (
		allowed    bool
		remaining  *int64
		retryAfter *int64
		status     string
	)
	err = tx.QueryRow(ctx,
		"SELECT bool_and(allowed), min(remaining), ceil(extract(epoch FROM max(retry_after)))::bigint,"+
			" min(status) FROM pklimit_check_all(ARRAY['login:' || $1, 'ip:' || $2],"+
			" ARRAY[$3::bigint, $4::bigint], ARRAY[$5::interval, $6::interval])",
		user, address, accountLimit, addressLimit, accountWindow, addressWindow).Scan(&allowed, &remaining, &retryAfter, &status)
	if err != nil {
		return 0, nil, err
	}
	if remaining != nil {
		headers["RateLimit-Remaining"] = strconv.FormatInt(*remaining, 10)
	}
	if status != "ok" {
		headers["X-RateLimit-Status"] = status
	}
	code := 401
	if !allowed {
		if retryAfter != nil {
			headers["Retry-After"] = strconv.FormatInt(*retryAfter, 10)
		}
		code = 429
	} else if stored, ok := users[user]; ok && hmac.Equal(stored, fakeHash(password)) {
		if _, err := tx.Exec(ctx, "SELECT pklimit_forget('login:' || $1)", user); err != nil {
			return 0, nil, err
		}
		code, headers = 200, map[string]string{}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, nil, err
	}
	return code, headers, nil
}

func header(h map[string]string, name string) string {
	if v, ok := h[name]; ok {
		return v
	}
	return "unknown"
}

func describe(code int, h map[string]string) string {
	switch code {
	case 429:
		return "429 retry_after=" + header(h, "Retry-After")
	case 401:
		line := "401 remaining=" + header(h, "RateLimit-Remaining")
		if s, ok := h["X-RateLimit-Status"]; ok {
			line += " status=" + s
		}
		return line
	}
	line := strconv.Itoa(code)
	if s, ok := h["X-RateLimit-Status"]; ok {
		line += " status=" + s
	}
	return line
}

func main() {
	ctx := context.Background()
	config, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Describe mode: no named prepared statements outlive a transaction, so
	// the handler also works behind pgbouncer in transaction pooling mode.
	config.BuildStatementCache = func(conn *pgconn.PgConn) stmtcache.Cache {
		return stmtcache.New(conn, stmtcache.ModeDescribe, 512)
	}
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close(ctx)

	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 4 {
			fmt.Fprintf(os.Stderr, "expected \"user tenant address password\", got %q\n", scanner.Text())
			os.Exit(1)
		}
		user, tenant, address, password := fields[0], fields[1], fields[2], fields[3]
		t := tenant
		if t == "-" {
			t = ""
		}
		code, headers, err := login(ctx, conn, user, t, address, password)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%s %s %s %s -> %s\n", user, tenant, address, password, describe(code, headers))
	}
}
