package config

// Web configures the pages a process serves besides its APIs: the index
// at / (always) and the demo pages under /demo/.
type Web struct {
	// DemoPages mounts the demo pages: auto (on in development mode,
	// auth.dev_secrets), on or off. The demo sign-in that mints user
	// tokens is further limited to development secrets (docs/web.md).
	DemoPages string `yaml:"demo_pages"`
}

func defaultWeb() Web {
	return Web{DemoPages: "auto"}
}

func (w Web) validate(bad badFunc) {
	switch w.DemoPages {
	case "auto", "on", "off":
	default:
		bad("web.demo_pages", "%q is not one of auto, on, off", w.DemoPages)
	}
}
