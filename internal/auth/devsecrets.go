package auth

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/presenced/presenced/internal/devfile"
)

// DevSecrets are generated once into the data folder in development mode and
// reused by every later start and by `presenced token`.
type DevSecrets struct {
	JWTSecret string `json:"jwtSecret"`
	APIKey    string `json:"apiKey"`
}

// DevSecretsFile is the file holding them under the data folder.
const DevSecretsFile = "dev-secrets.json"

// LoadOrCreateDevSecrets reads dataDir/dev-secrets.json, creating it with
// fresh random values if it does not exist. Concurrent first starts agree on
// one file: it appears whole, and a process that loses the race to create
// it reads the winner's.
func LoadOrCreateDevSecrets(dataDir string) (DevSecrets, error) {
	path := filepath.Join(dataDir, DevSecretsFile)
	if s, err := readDevSecrets(path); err == nil {
		return s, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return DevSecrets{}, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return DevSecrets{}, fmt.Errorf("dev secrets: %w", err)
	}
	fresh, _ := json.MarshalIndent(DevSecrets{JWTSecret: randomToken(32), APIKey: randomToken(24)}, "", "  ")
	data, err := devfile.CreateOnce(path, fresh, 0o600)
	if err != nil {
		return DevSecrets{}, fmt.Errorf("dev secrets: %w", err)
	}
	return parseDevSecrets(path, data)
}

// ReadDevSecrets reads dataDir/dev-secrets.json without ever creating it,
// for tools that must sign with the secrets a server already uses. A
// missing file is an error that matches os.ErrNotExist.
func ReadDevSecrets(dataDir string) (DevSecrets, error) {
	return readDevSecrets(filepath.Join(dataDir, DevSecretsFile))
}

func readDevSecrets(path string) (DevSecrets, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return DevSecrets{}, err
	}
	return parseDevSecrets(path, data)
}

func parseDevSecrets(path string, data []byte) (DevSecrets, error) {
	var s DevSecrets
	if err := json.Unmarshal(data, &s); err != nil || s.JWTSecret == "" || s.APIKey == "" {
		return DevSecrets{}, fmt.Errorf("dev secrets %s: unreadable or incomplete (delete it to regenerate)", path)
	}
	return s, nil
}

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
