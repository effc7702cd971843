package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
)

// progress reports how far the demo has come: on a terminal a one-line bar
// redrawn in place with \r, otherwise a plain line every few seconds.
type progress struct {
	w      io.Writer
	tty    bool
	total  int
	status func() (written, delivered int)

	start time.Time
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

const (
	barWidth      = 30
	ttyInterval   = 100 * time.Millisecond
	plainInterval = 2 * time.Second
)

func startProgress(w io.Writer, total int, status func() (written, delivered int)) *progress {
	p := &progress{
		w: w, tty: command.IsTerminal(w), total: total, status: status,
		start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	interval := plainInterval
	if p.tty {
		interval = ttyInterval
	}
	redraw(p.w, interval, p.stop, p.tty, p.draw)
}

// redraw calls draw every interval until stop is closed. With inPlace (a bar
// redrawn with \r on a terminal) it draws once more at the end, so that the
// last line shows the final state, and ends that line.
func redraw(w io.Writer, interval time.Duration, stop <-chan struct{}, inPlace bool, draw func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			if inPlace {
				draw()
				fmt.Fprintln(w)
			}
			return
		case <-t.C:
			draw()
		}
	}
}

// bar draws a progress bar of barWidth characters, filled of them done.
func bar(filled int) string {
	return strings.Repeat("#", filled) + strings.Repeat(".", barWidth-filled)
}

func (p *progress) draw() {
	written, delivered := p.status()
	elapsed := time.Since(p.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(delivered) / s
	}
	pct := 0
	if p.total > 0 {
		pct = min(100, delivered*100/p.total)
	}
	note := ""
	if written >= p.total && delivered < written {
		note = ", all written, waiting for deliveries"
	}
	if !p.tty {
		fmt.Fprintf(p.w, "progress: %d/%d delivered (%d%%), %d written, %.0f msg/s, %s%s\n",
			delivered, p.total, pct, written, rate, elapsed.Round(time.Second), note)
		return
	}
	// The trailing spaces erase what a longer previous line left behind.
	fmt.Fprintf(p.w, "\r[%s] %3d%% %d/%d delivered, %d written, %6.0f msg/s  %s%s   ",
		bar(pct*barWidth/100), pct, delivered, p.total, written, rate, elapsed.Round(100*time.Millisecond), note)
}

// Stop draws the final state (on a terminal) and ends the reporter. It is
// idempotent.
func (p *progress) Stop() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}
