/** An error the reader must see: announced at once by screen readers (role="alert"). Nothing when there is none. */
export function ErrorText({ message }: { message: string | null | undefined }) {
  if (!message) return null;
  return (
    <p class="error" role="alert">
      {message}
    </p>
  );
}

export interface Notice {
  ok: boolean;
  text: string;
}

/** What an action did: a status when it worked (announced politely), an alert when it did not. */
export function NoticeText({ notice }: { notice: Notice | null }) {
  if (!notice) return null;
  if (!notice.ok) return <ErrorText message={notice.text} />;
  return (
    <p class="notice" role="status">
      {notice.text}
    </p>
  );
}
