// HttpStream apart from sockets (Note [Streamed answers]): what a producer
// writes reaches the connection in order and once, the end is seen once, and
// a client that goes away cancels the producer exactly once.
#include "serving/http_stream.h"

#include <gtest/gtest.h>

#include <thread>

namespace grove::serving {
namespace {

TEST(HttpStream, PiecesArriveInOrderThenTheEndOnce) {
  HttpStream stream(HttpStream::Mode::kChunked);
  int updates = 0;
  stream.watch([&] { ++updates; });
  stream.write("data: 1\n\n");
  stream.write("data: 2\n\n");
  HttpStream::Update first = stream.take();
  EXPECT_EQ(first.bytes, "data: 1\n\ndata: 2\n\n");
  EXPECT_FALSE(first.ended);
  stream.write("data: 3\n\n");
  stream.close();
  stream.write("data: late\n\n");  // after the end: dropped
  HttpStream::Update last = stream.take();
  EXPECT_EQ(last.bytes, "data: 3\n\n");
  EXPECT_TRUE(last.ended);
  EXPECT_FALSE(stream.take().ended);  // the end is taken once
  EXPECT_EQ(updates, 4);              // three writes and the close
}

TEST(HttpStream, WholeAnswerComesOnceEnded) {
  HttpStream stream(HttpStream::Mode::kWhole);
  stream.write("ignored");  // a whole answer has no pieces
  EXPECT_FALSE(stream.take().ended);
  HttpResponse response;
  response.status = 201;
  response.body = "{}";
  std::thread producer([&] { stream.answer(response); });
  producer.join();
  HttpStream::Update update = stream.take();
  ASSERT_TRUE(update.ended);
  ASSERT_TRUE(update.response.has_value());
  EXPECT_EQ(update.response->status, 201);
  EXPECT_EQ(update.response->body, "{}");
}

TEST(HttpStream, ClientGoneCancelsTheProducerOnce) {
  HttpStream stream(HttpStream::Mode::kChunked);
  int cancels = 0;
  stream.on_cancel([&] { ++cancels; });
  stream.cancel();
  stream.cancel();
  EXPECT_EQ(cancels, 1);
  EXPECT_TRUE(stream.cancelled());
  stream.write("data: x\n\n");  // nobody reads it
  EXPECT_TRUE(stream.take().bytes.empty());
  // A producer that registers after the client left is told at once.
  int late = 0;
  stream.on_cancel([&] { ++late; });
  EXPECT_EQ(late, 1);
}

TEST(HttpStream, AFinishedStreamIsNotCancelled) {
  HttpStream stream(HttpStream::Mode::kChunked);
  int cancels = 0;
  stream.on_cancel([&] { ++cancels; });
  stream.close();
  EXPECT_TRUE(stream.take().ended);
  stream.cancel();  // the socket closed after the last chunk was taken
  EXPECT_EQ(cancels, 0);
}

TEST(HttpStream, ChunkFramingIsHexLengthThenBytes) {
  EXPECT_EQ(http_chunk(""), "");
  EXPECT_EQ(http_chunk("data: {}\n\n"), "a\r\ndata: {}\n\n\r\n");
  EXPECT_EQ(http_chunk(std::string(300, 'x')).substr(0, 5), "12c\r\n");
  HttpResponse response;
  response.content_type = "text/event-stream";
  const std::string head = chunked_response_head(response, true);
  EXPECT_NE(head.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_EQ(head.find("Content-Length"), std::string::npos);
  EXPECT_NE(head.find("Content-Type: text/event-stream\r\n"), std::string::npos);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
}

// Note [Streams to HTTP/1.0 clients]: no chunked coding, and the connection closes.
TEST(HttpStream, HeadWithoutChunksForHttp10) {
  HttpResponse response;
  response.content_type = "text/event-stream";
  const std::string head = chunked_response_head(response, false, /*chunked=*/false);
  EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos);
  EXPECT_EQ(head.find("Content-Length"), std::string::npos);
  EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
}

// Note [A response head without allocations]: the head written into a kept
// string replaces its text, and is response_head()'s text.
TEST(HttpMessage, ResponseHeadHasEveryField) {
  HttpResponse response;
  response.status = 503;
  response.content_type = "application/octet-stream";
  response.headers.emplace_back("Retry-After", "7");
  response.body = "12345";
  std::string head(300, 'x');
  write_response_head(head, response, /*keep_alive=*/false);
  EXPECT_EQ(head,
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/octet-stream\r\n"
            "Content-Length: 5\r\nAccept-Ranges: none\r\nConnection: close\r\n"
            "Retry-After: 7\r\n\r\n");
  EXPECT_EQ(response_head(response, false), head);
  response.status = 200;
  response.headers.clear();
  response.body = std::string(123456, 'b');
  write_response_head(head, response, /*keep_alive=*/true);
  EXPECT_EQ(head,
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            "Content-Length: 123456\r\nAccept-Ranges: none\r\nConnection: keep-alive\r\n\r\n");
}

}  // namespace
}  // namespace grove::serving
