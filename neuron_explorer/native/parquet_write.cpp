// Writes a stream of record batches into one Parquet file with its columns encoded in parallel
// (plain C ABI, loaded with ctypes; see parquet_native.py).
//
// pyarrow's ParquetWriter encodes a row group's columns one after another on one thread; Arrow's
// C++ writer can encode them on several (ArrowWriterProperties::use_threads, buffered row groups),
// which pyarrow does not expose. This is built against the headers and libraries of the pyarrow
// it runs with, and receives the batches through the Arrow C stream interface, so the file is what
// pyarrow's own writer would write with the same properties (parquet_native.py sets them all and
// tests hold the two equal).

#include <arrow/c/abi.h>
#include <arrow/c/bridge.h>
#include <arrow/io/file.h>
#include <arrow/record_batch.h>
#include <arrow/util/key_value_metadata.h>
#include <arrow/util/thread_pool.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

// NUL-separated strings of `len` bytes → their list.
std::vector<std::string> split(const char* data, int64_t len) {
  std::vector<std::string> out;
  int64_t start = 0;
  for (int64_t i = 0; i < len; ++i) {
    if (data[i] == '\0') {
      out.emplace_back(data + start, (size_t)(i - start));
      start = i + 1;
    }
  }
  return out;
}

arrow::Status write(ArrowArrayStream* stream, const char* path, int64_t row_group_rows, const std::vector<std::string>& dict_cols,
                    const std::vector<std::string>& delta_cols, const std::vector<std::string>& kv, int32_t threads) {
  ARROW_ASSIGN_OR_RAISE(auto reader, arrow::ImportRecordBatchReader(stream));
  parquet::WriterProperties::Builder props;
  // as pyarrow.parquet.ParquetWriter(compression="zstd", write_statistics=True, use_dictionary=[...],
  // column_encoding={...: "DELTA_BINARY_PACKED"}, store_schema=False) sets them, its defaults included
  props.version(parquet::ParquetVersion::PARQUET_2_6);
  props.data_page_version(parquet::ParquetDataPageVersion::V1);
  props.compression(arrow::Compression::ZSTD);
  props.enable_statistics();
  props.disable_dictionary();
  for (const auto& c : dict_cols) props.enable_dictionary(c);
  for (const auto& c : delta_cols) props.encoding(c, parquet::Encoding::DELTA_BINARY_PACKED);
  props.disable_content_defined_chunking();
  props.disable_page_checksum();
  props.disable_write_page_index();
  props.max_row_group_length(row_group_rows);
  std::shared_ptr<arrow::internal::ThreadPool> pool;
  parquet::ArrowWriterProperties::Builder arrow_props;
  arrow_props.disable_deprecated_int96_timestamps();
  arrow_props.disallow_truncated_timestamps();
  arrow_props.enable_compliant_nested_types();
  arrow_props.set_time_adjusted_to_utc(false);
  if (threads > 1) {
    // a pool of this write's own: Arrow warns that files written in parallel on one shared pool can deadlock
    ARROW_ASSIGN_OR_RAISE(pool, arrow::internal::ThreadPool::Make(threads));
    arrow_props.set_use_threads(true);
    arrow_props.set_executor(pool.get());
  }
  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::FileOutputStream::Open(path));
  ARROW_ASSIGN_OR_RAISE(auto writer, parquet::arrow::FileWriter::Open(*reader->schema(), arrow::default_memory_pool(), sink,
                                                                      props.build(), arrow_props.build()));
  while (true) {
    std::shared_ptr<arrow::RecordBatch> batch;
    ARROW_RETURN_NOT_OK(reader->ReadNext(&batch));
    if (!batch) break;
    if (batch->num_rows() == 0) continue;
    // into the open row group, a new one begun at row_group_rows rows (max_row_group_length): a row
    // group can come in pieces, so that only a piece of it is held in memory at once
    ARROW_RETURN_NOT_OK(writer->WriteRecordBatch(*batch));
  }
  std::vector<std::string> keys, values;
  for (size_t i = 0; i + 1 < kv.size(); i += 2) {
    keys.push_back(kv[i]);
    values.push_back(kv[i + 1]);
  }
  if (!keys.empty()) ARROW_RETURN_NOT_OK(writer->AddKeyValueMetadata(arrow::key_value_metadata(keys, values)));
  ARROW_RETURN_NOT_OK(writer->Close());
  return sink->Close();
}

}  // namespace

extern "C" {

// Writes the batches of `stream` (consumed, released here) into the Parquet file at `path`; the
// batches must share the stream's schema and hold at most `row_group_rows` rows each. dict_cols:
// NUL-terminated names of the columns written with dictionary pages; delta_cols: those of the
// integer columns written DELTA_BINARY_PACKED (none of dict_cols); kv: NUL-terminated key,
// value, key, value ... added to the file's metadata; threads: columns encoded at once. Returns 0,
// or -1 with the reason in err (NUL-terminated, at most err_len bytes).
int32_t nxw_write(ArrowArrayStream* stream, const char* path, int64_t row_group_rows, const char* dict_cols, int64_t dict_len,
                  const char* delta_cols, int64_t delta_len, const char* kv, int64_t kv_len, int32_t threads, char* err,
                  int64_t err_len) {
  arrow::Status st;
  try {
    st = write(stream, path, row_group_rows, split(dict_cols, dict_len), split(delta_cols, delta_len), split(kv, kv_len),
               threads);
  } catch (const std::exception& e) {
    st = arrow::Status::UnknownError(e.what());
  }
  if (stream->release) stream->release(stream);  // (ImportRecordBatchReader moved it: released already, unless it failed first)
  if (st.ok()) return 0;
  std::string msg = st.ToString();
  if (err_len > 0) {
    size_t n = std::min(msg.size(), (size_t)(err_len - 1));
    memcpy(err, msg.data(), n);
    err[n] = '\0';
  }
  return -1;
}
}
