package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/mightyetl/mightyetl/client"
)

// Submit a batch, then wait for the job to end.
func Example() {
	c, err := client.New("http://127.0.0.1:8080",
		client.WithBasicAuth(os.Getenv("MIGHTYETL_API_USER"), os.Getenv("MIGHTYETL_API_PASSWORD")))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	records := []byte(`[{"id":"a1","name":"jane","amount":"999.9"}]`)
	sub, err := c.Submit(ctx, records, "") // a key is generated: sub.Key
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Wait(ctx, sub.JobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.ID, job.Status, job.FailureCode)
}

// Problems are *client.Error values: switch on the code. This example's
// service is a stand-in that answers every request with a 404 problem.
func ExampleError() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"type":"urn:mightyetl:problem:etl-job-not-found","title":"Job not found","status":404,`+
			`"detail":"No job with this id exists for the caller.","instance":%q,"errorCode":"etl_job_not_found"}`, r.URL.Path)
	}))
	defer srv.Close()

	c, _ := client.New(srv.URL, client.WithBasicAuth("alice", "secret"))
	_, err := c.Get(context.Background(), "0b9d5a7e-8c1f-4e53-9a51-2f7c6a1d3e40")
	var p *client.Error
	if errors.As(err, &p) {
		switch p.Code {
		case client.CodeJobNotFound:
			fmt.Println("no such job:", p.Status, p.Detail)
		default:
			fmt.Println("other problem:", p.Code)
		}
	}
	// Output: no such job: 404 No job with this id exists for the caller.
}

// Iterate over every job of the caller, 100 per request.
func ExampleClient_All() {
	c, _ := client.New("", client.WithBearerToken(client.StaticToken(os.Getenv("MIGHTYETL_API_TOKEN"))))
	for job, err := range c.All(context.Background(), client.ListOptions{Status: client.StatusFailed, Limit: 100}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(job.ID, job.FailureCode)
	}
}

// Cancel a job and replay it later with its original bytes.
func ExampleClient_Replay() {
	c, _ := client.New("", client.WithBasicAuth("alice", os.Getenv("MIGHTYETL_API_PASSWORD")))
	ctx := context.Background()
	records := []byte(`[{"id":"a1"}]`)
	sub, err := c.Submit(ctx, records, "")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Cancel(ctx, sub.JobID, ""); err != nil {
		log.Fatal(err)
	}
	again, err := c.Replay(ctx, sub.JobID, records, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replayed as", again.JobID)
}

// Load a batch synchronously; the generated key makes a retry safe.
func ExampleClient_Process() {
	c, _ := client.New("", client.WithBasicAuth("alice", os.Getenv("MIGHTYETL_API_PASSWORD")))
	res, err := c.Process(context.Background(), []byte(`[{"id":"a1"},{"id":"a2"}]`), "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Processed, res.Key)
}

// Load a large JSON Lines file as one job, resuming once if the upload is
// interrupted, and follow the load's progress.
func ExampleClient_Upload() {
	c, _ := client.New("", client.WithBasicAuth("alice", os.Getenv("MIGHTYETL_API_PASSWORD")))
	ctx := context.Background()
	f, err := os.Open("big.jsonl")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	opts := client.UploadOptions{Format: client.FormatJSONLines, MaxBadRecords: 10,
		Progress: func(p client.UploadProgress) { log.Printf("sent %d of %d bytes", p.Bytes, p.Total) }}
	sub, err := c.Upload(ctx, f, opts)
	var ue *client.UploadError
	if errors.As(err, &ue) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			log.Fatal(err)
		}
		opts.UploadID, opts.Key = ue.UploadID, ue.Key // only the missing parts go
		sub, err = c.Upload(ctx, f, opts)
	}
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Watch(ctx, sub.JobID, func(j *client.Job) {
		if p := j.Progress; p != nil {
			log.Printf("%s: %d records loaded", j.Status, p.RecordsLoaded)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.Status)
}
