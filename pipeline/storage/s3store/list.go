package s3store

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// Stat returns the object's Info from a HEAD (Size in bytes, ModTime in
// UTC); see storage.Store. Errors, naming the key and the store's URL:
// ctx's, storage.ErrInvalidKey, storage.ErrNotFound (wrapped), else
// HeadObject's.
func (s *Store) Stat(ctx context.Context, key string) (storage.Info, error) {
	if err := s.begin(ctx, "stat", key); err != nil {
		return storage.Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(key))})
	if err != nil {
		return storage.Info{}, s.fail(ctx, "stat", key, err)
	}
	info := storage.Info{Key: key, Size: aws.ToInt64(out.ContentLength)}
	if out.LastModified != nil {
		info.ModTime = out.LastModified.UTC()
	}
	return info, nil
}

// storeKey returns the store key of a full object key: the key relative
// to the store's prefix, when it is under the prefix and valid (other
// tools' "dir/" markers are not).
func (s *Store) storeKey(full string) (string, bool) {
	key, ok := strings.CutPrefix(full, s.opts.Prefix)
	return key, ok && storage.ValidateKey(key) == nil
}

// List pages through ListObjectsV2 (1000 keys a page) and returns the
// objects under prefix, sorted by key. Keys that break the key rules (e.g.
// "dir/" markers made by other tools) are skipped. Errors: ctx's and
// ListObjectsV2's, wrapped with the prefix and the store's URL.
func (s *Store) List(ctx context.Context, prefix string) ([]storage.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %q in %s: %w", prefix, s.url, err)
	}
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: &s.opts.Bucket,
		Prefix: aws.String(s.opts.Prefix + prefix),
	})
	out := []storage.Info{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %q in %s: %w", prefix, s.url, s.noAnswer(ctx, err))
		}
		for _, o := range page.Contents {
			key, ok := s.storeKey(aws.ToString(o.Key))
			if !ok {
				continue
			}
			info := storage.Info{Key: key, Size: aws.ToInt64(o.Size)}
			if o.LastModified != nil {
				info.ModTime = o.LastModified.UTC()
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// uploadParam separates an object key from its multipart upload id in the
// temp keys ListTemp returns: "KEY?uploadId=ID", as in S3's REST paths.
const uploadParam = "?uploadId="

// ListTemp returns the incomplete multipart uploads (storage.TempCollector)
// whose key relative to the store's prefix starts with prefix, sorted by
// Key (the joined "KEY?uploadId=ID" string). A Put of more than part_size bytes whose writer was
// killed leaves one behind: its parts are stored (and billed) but no key
// names them, and S3 never expires them without a bucket lifecycle rule.
// Each Info's Key is "KEY?uploadId=ID" (KEY a valid storage key), Size the
// total size in bytes of the parts uploaded so far (ListParts), and
// ModTime the upload's initiation time in UTC. Uploads under keys that
// break the key rules (made by other tools) are skipped. Errors: ctx's and
// those of ListMultipartUploads and ListParts, wrapped with the prefix and
// the store's URL; an upload that completes or is aborted while it is
// being listed is left out.
func (s *Store) ListTemp(ctx context.Context, prefix string) ([]storage.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list temp %q in %s: %w", prefix, s.url, err)
	}
	p := s3.NewListMultipartUploadsPaginator(s.client, &s3.ListMultipartUploadsInput{
		Bucket: &s.opts.Bucket,
		Prefix: aws.String(s.opts.Prefix + prefix),
	})
	out := []storage.Info{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list temp %q in %s: %w", prefix, s.url, s.noAnswer(ctx, err))
		}
		for _, u := range page.Uploads {
			full, id := aws.ToString(u.Key), aws.ToString(u.UploadId)
			key, ok := s.storeKey(full)
			if !ok || id == "" {
				continue
			}
			size, err := s.uploadedBytes(ctx, full, id)
			if isNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list temp %q in %s: parts of %s: %w", prefix, s.url, key, s.noAnswer(ctx, err))
			}
			info := storage.Info{Key: key + uploadParam + id, Size: size}
			if u.Initiated != nil {
				info.ModTime = u.Initiated.UTC()
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// uploadedBytes sums the sizes (bytes) of the parts of one multipart
// upload; object is the full object key. A 404 (NoSuchUpload) is returned
// as is.
func (s *Store) uploadedBytes(ctx context.Context, object, id string) (int64, error) {
	p := s3.NewListPartsPaginator(s.client, &s3.ListPartsInput{Bucket: &s.opts.Bucket, Key: &object, UploadId: &id})
	var n int64
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		for _, part := range page.Parts {
			n += aws.ToInt64(part.Size)
		}
	}
	return n, nil
}

// DeleteTemp aborts one incomplete multipart upload that ListTemp returned
// (storage.TempCollector), which deletes its parts. A key that is not
// "KEY?uploadId=ID" with a valid KEY and an ID without "/" is refused (storage.ErrInvalidKey);
// an upload that no longer exists (completed or aborted meanwhile) gives
// storage.ErrNotFound, wrapped. Other errors are AbortMultipartUpload's
// and ctx's, wrapped with the key and the store's URL.
func (s *Store) DeleteTemp(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete temp %s in %s: %w", key, s.url, err)
	}
	i := strings.LastIndex(key, uploadParam)
	if i < 0 {
		i = len(key)
	}
	object, id := key[:i], strings.TrimPrefix(key[i:], uploadParam)
	if id == "" || strings.Contains(id, "/") || storage.ValidateKey(object) != nil {
		return fmt.Errorf("delete temp in %s: %w: %q is not an incomplete multipart upload", s.url, storage.ErrInvalidKey, key)
	}
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(object)), UploadId: &id,
	})
	if err != nil {
		return s.fail(ctx, "delete temp", key, err)
	}
	return nil
}

// Delete removes the object. S3's DeleteObject succeeds on a missing key,
// so a HEAD first supplies the contract's ErrNotFound; the pair is not
// atomic, and a concurrent Delete of the same key may both succeed.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.begin(ctx, "delete", key); err != nil {
		return err
	}
	k := aws.String(s.objectKey(key))
	if _, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.opts.Bucket, Key: k}); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.opts.Bucket, Key: k}); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}
